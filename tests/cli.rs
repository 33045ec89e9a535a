//! The binary's handling of bad input: a clear message naming the file, group and field,
//! exit code 2, and nothing attached (these run without root or sched_ext because input is
//! validated before anything is loaded).

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_scx_bandwidth")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn config(name: &str, text: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("scxbw-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
fn bad_cli_values_exit_2() {
    for (args, want) in [
        (&["--slice-us", "0"][..], "out of range"),
        (&["--slice-us=-5"][..], "not a whole number"),
        (&["--task-slice-us", "abc"][..], "not a whole number"),
        (&["--stats", "0"][..], "out of range"),
        (&["--bogus"][..], "unexpected argument"),
    ] {
        let (code, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
    }
}
