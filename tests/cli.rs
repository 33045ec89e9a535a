//! The binary's handling of bad input: a clear message naming the file, group and field,
//! exit code 2, and nothing attached (these run without root or sched_ext because input is
//! validated before anything is loaded).

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_scx_bandwidth")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn config(name: &str, text: &[u8]) -> std::path::PathBuf {
    // One fresh directory per test process: a directory left by an earlier run whose pid
    // this one reuses would hand back files with that run's modes (std::fs::write keeps an
    // existing file's mode), and a test that chmods a file would see it changed already.
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("scxbw-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn bad_configs_exit_2_with_the_field_named() {
    let cases: &[(&str, &[u8], &str)] = &[
        ("empty.toml", b"", "empty.toml: defines no [[group]]"),
        ("quota.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 10\n", "group 1 (cgroup \"a\"): quota_us = 10: out of range"),
        ("period.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\nperiod_us = 2000000\n", "period_us = 2000000: out of range"),
        ("burst.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\nburst_us = 6000\n", "burst may not exceed quota_us"),
        ("neg.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = -1\n", "quota_us = -1: must not be negative"),
        ("dup.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\n[[group]]\ncgroup = \"a/\"\nquota_us = 5000\n", "duplicate of group 1"),
        ("key.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\nquota = 1\n", "unknown field `quota`"),
        ("dots.toml", b"[[group]]\ncgroup = \"../etc\"\nquota_us = 5000\n", "contains \"..\""),
        ("abs.toml", b"[[group]]\ncgroup = \"/sys/fs/cgroup/a\"\nquota_us = 5000\n", "is absolute"),
        ("binary.toml", b"\xff\xfe[[group]]", "not UTF-8"),
        ("rule_pct.toml", b"[[rule]]\nname = \"pods\"\nmatch = \"kubepods.slice/**\"\nburst_pct = 150\n", "rule 1 (\"pods\"): burst_pct = 150: out of range"),
        ("rule_glob.toml", b"[[rule]]\nmatch = \"kubepods.slice/pod**\"\nburst_pct = 10\n", "rule 1 (match \"kubepods.slice/pod**\"): match: "),
        ("rule_none.toml", b"[[rule]]\nmatch = \"system.slice/*.service\"\n", "rule 1 (match \"system.slice/*.service\"): sets nothing"),
        ("rule_key.toml", b"[[rule]]\nmatch = \"a/*\"\nburst_percent = 10\n", "unknown field `burst_percent`"),
    ];
    for (name, text, want) in cases {
        let p = config(name, text);
        let (code, err) = run(&["--config", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(want), "{name}: expected {want:?} in {err:?}");
        assert!(err.contains(name), "{name}: the file is not named in {err:?}");
        assert!(!err.contains("attached"), "{name}: {err}");
    }
}

#[test]
fn config_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = config("open.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\n");
    for mode in [0o666, 0o620] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, err) = run(&["--config", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{mode:o}: {err}");
        assert!(err.contains("open.toml: writable by group or others"), "{mode:o}: {err}");
    }
    // (The other cases' files are 0644 and get past this check to their own errors.)
}

#[test]
fn missing_config_exits_2() {
    let (code, err) = run(&["--config", "/nonexistent/scxbw.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/scxbw.toml: cannot read"), "{err}");
}

#[test]
fn overflowing_values_exit_2() {
    // Beyond i64 (TOML's integers) and beyond what fits in ns: both named, neither wraps.
    for (name, text, want) in [
        ("u64max.toml", "[[group]]\ncgroup = \"a\"\nquota_us = 18446744073709551615\n", "u64max.toml:3"),
        ("i64max.toml", "[[group]]\ncgroup = \"a\"\nquota_us = 9223372036854775807\n", "quota_us = 9223372036854775807: out of range"),
        ("burstmax.toml", "[[group]]\ncgroup = \"a\"\nquota_us = 5000\nburst_us = 9223372036854775807\n", "burst_us = 9223372036854775807"),
    ] {
        let p = config(name, text.as_bytes());
        let (code, err) = run(&["--config", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(want), "{name}: expected {want:?} in {err:?}");
    }
}

#[test]
fn huge_and_special_files_exit_2() {
    // Bigger than any configuration: refused without reading it all.
    let mut big = b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\n".to_vec();
    big.resize(5 << 20, b'#');
    let p = config("huge.toml", &big);
    let (code, err) = run(&["--config", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("huge.toml: larger than 4 MiB"), "{err}");
    // Not a file: a directory, and a device that never ends.
    for path in [std::env::temp_dir().to_str().unwrap(), "/dev/zero"] {
        let (code, err) = run(&["--config", path]);
        assert_eq!(code, 2, "{path}: {err}");
        assert!(err.contains("not a regular file"), "{path}: {err}");
    }
}

#[test]
fn symlinked_config_is_checked_where_it_leads() {
    use std::os::unix::fs::PermissionsExt;
    // A symlink to a good file works (ConfigMaps are mounted that way) ...
    let good = config("target.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\nperiod_us = 2000000\n");
    let link = good.with_file_name("link.toml");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let (code, err) = run(&["--config", link.to_str().unwrap()]);
    // (its content is refused on purpose, so the run stops before attaching)
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("link.toml: group 1 (cgroup \"a\"): period_us = 2000000: out of range"), "{err}");
    // ... and the file it leads to is the one whose permissions count; both are named.
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err) = run(&["--config", link.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("link.toml (->") && err.contains("target.toml): writable by group or others"), "{err}");
    // A dangling link names the link.
    let dangling = good.with_file_name("dangling.toml");
    let _ = std::fs::remove_file(&dangling);
    std::os::unix::fs::symlink("/nonexistent/x.toml", &dangling).unwrap();
    let (code, err) = run(&["--config", dangling.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dangling.toml: cannot read"), "{err}");
}

#[test]
fn bad_cli_values_exit_2() {
    for (args, want) in [
        (&["--slice-us", "0"][..], "out of range"),
        (&["--slice-us=-5"][..], "not a whole number"),
        (&["--task-slice-us", "abc"][..], "not a whole number"),
        (&["--stats", "0"][..], "out of range"),
        (&["--stats-group", "no-such-group-scxbw"][..], "no group named \"no-such-group-scxbw\""),
        (&["--stats-group", "4242", "--monitor", "1"][..], "cannot be used with"),
        (&["--metrics-addr", "localhost:http"][..], "invalid value 'localhost:http' for '--metrics-addr"),
        (&["--metrics-addr", "127.0.0.1:9567", "--monitor", "1"][..], "cannot be used with"),
        (&["--metrics-textfile", "/nonexistent-scxbw/node.prom"][..], "--metrics-textfile /nonexistent-scxbw/node.prom: cannot write"),
        (&["--metrics-textfile", "/tmp"][..], "--metrics-textfile /tmp: is a directory"),
        (&["--metrics-textfile", "/tmp/x.prom", "--monitor", "1"][..], "cannot be used with"),
        (&["--graph"][..], "required arguments were not provided"),
        (&["--bogus"][..], "unexpected argument"),
    ] {
        let (code, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
    }
}

#[test]
fn unreadable_config_exits_2() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let p = config("secret.toml", b"[[group]]\ncgroup = \"a\"\nquota_us = 5000\n");
    let mut cmd;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Root reads any file: run as nobody, for whom a root-owned 0600 file is
        // unreadable. The binary is copied next to the file, out of a directory (the
        // checkout may be under /root) that nobody may not enter.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let bin = p.with_file_name("scx_bandwidth");
        std::fs::copy(env!("CARGO_BIN_EXE_scx_bandwidth"), &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        cmd = Command::new(bin);
        cmd.uid(65534).gid(65534);
    } else {
        // The owner cannot read a file with mode 0000 either (without root's override).
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        cmd = Command::new(env!("CARGO_BIN_EXE_scx_bandwidth"));
    }
    cmd.args(["--config", p.to_str().unwrap()]);
    // The copy was just written: a child another test forks meanwhile holds its write
    // descriptor until it execs, and exec of the copy then fails with ETXTBSY. Retry.
    let mut tries = 0;
    let out = loop {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("secret.toml: cannot read") && err.contains("Permission denied"), "{err}");
    assert!(!err.contains("attached"), "{err}");
}

/// On a kernel without sched_ext (as on the machines that build this project) the binary
/// says so and where to go, instead of libbpf's "dump() missing, kernel too old?".
#[test]
fn kernel_without_sched_ext_is_named() {
    if std::path::Path::new("/sys/kernel/sched_ext").exists() {
        eprintln!("skipped: this kernel has sched_ext");
        return;
    }
    let (code, err) = run(&[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no sched_ext") && err.contains("CONFIG_SCHED_CLASS_EXT") && err.contains("tests/vm/demo"), "{err}");
}

#[test]
fn advise_bad_input_exits_2_naming_the_option() {
    let cases: &[(&[&str], &str)] = &[
        (&["advise", "--max-throttled-pct", "150"], "--max-throttled-pct"),
        (&["advise", "--max-throttled-pct", "x"], "\"x\" is not a percentage"),
        (&["advise", "--quota-us", "10"], "--quota-us"),
        (&["advise", "--max-wait-ms=-3"], "--max-wait-ms"),
        (&["advise", "--max-wait-ms", "soon"], "\"soon\" is not a number of milliseconds"),
        (&["advise", "--quota-us", "20000", "--burst-us", "30000"], "--burst-us 30000: out of range (allowed 0..=20000"),
        (&["--config", "/nonexistent", "advise"], "advise"),
    ];
    for (args, want) in cases {
        let (code, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
    }
}

#[test]
fn advise_without_a_running_instance_says_so() {
    // No scheduler runs where the tests run (no sched_ext, or not this one): exit 1, the
    // socket named, nothing else attempted.
    let (code, err) = run(&["advise"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach a running scx_bandwidth at /var/run/scx/root/stats"), "{err}");
}
