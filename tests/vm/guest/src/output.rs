//! The result lines the workloads print (`DUTY`, `DUTY_BURNS`, `FORKS`, `GAP`), parsed for the scenarios:
//! a workload runs as a separate process (it joins its cgroup), so its results come back as
//! text in its output.

/// The figures of a `DUTY burns=.. p50_ms=.. p99_ms=.. max_ms=..` line.
#[derive(Debug, PartialEq)]
pub struct DutyStats {
    pub burns: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The slower of the threads' first (warm-up) burns, which start together.
    pub first_ms: f64,
    /// The three slowest burns as `ms@tTHREAD#INDEX`.
    pub slowest: String,
}

/// Finds and parses the DUTY line in a workload's output.
pub fn parse_duty(output: &str) -> Option<DutyStats> {
    let line = output.lines().find(|l| l.starts_with("DUTY "))?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some(DutyStats {
        burns: field("burns")? as u64,
        p50_ms: field("p50_ms")?,
        p99_ms: field("p99_ms")?,
        max_ms: field("max_ms")?,
        first_ms: field("first_ms")?,
        slowest: line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("slowest="))
            .unwrap_or("")
            .to_string(),
    })
}

/// The burn times (ms) of the `DUTY_BURNS ms,ms,..` line in a workload's output, in the
/// order the burns started. None without the line, or if a value is not a finite number: a
/// list cut short by a crash is not a distribution.
pub fn parse_duty_burns(output: &str) -> Option<Vec<f64>> {
    let list = output.lines().find_map(|l| l.strip_prefix("DUTY_BURNS "))?.trim();
    if list.is_empty() {
        return Some(Vec::new());
    }
    list.split(',').map(|v| v.parse::<f64>().ok().filter(|ms| ms.is_finite())).collect()
}

/// The count of a `FORKS n=COUNT` line in a workload's output.
pub fn parse_forks(output: &str) -> Option<u64> {
    output.lines().find_map(|l| l.strip_prefix("FORKS n=")?.trim().parse().ok())
}

/// One `GAP` line of the `gaps` workload: when the stretch ended (ns), how long it was (ns),
/// and the CPUs before and after (`A>B`, empty in older output).
#[derive(Debug, PartialEq)]
pub struct Gap<'a> {
    pub end_ns: u64,
    pub len_ns: u64,
    pub cpus: &'a str,
}

/// The `GAP` lines of `gaps` output; others are skipped.
pub fn parse_gaps(output: &str) -> Vec<Gap<'_>> {
    output
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("GAP ")?.split(' ');
            let end_ns = f.next()?.strip_prefix("end_ns=")?.parse().ok()?;
            let len_ns = f.next()?.strip_prefix("len_ns=")?.parse().ok()?;
            let cpus = f.next().and_then(|c| c.strip_prefix("cpu=")).unwrap_or("");
            Some(Gap { end_ns, len_ns, cpus })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duty_line() {
        let out = "noise\nDUTY burns=134 p50_ms=10.003 p99_ms=10.093 max_ms=12.5 first_ms=14.2 slowest=12.5@t1#0,10.1@t0#7\n";
        assert_eq!(
            parse_duty(out),
            Some(DutyStats {
                burns: 134,
                p50_ms: 10.003,
                p99_ms: 10.093,
                max_ms: 12.5,
                first_ms: 14.2,
                slowest: "12.5@t1#0,10.1@t0#7".into(),
            })
        );
        assert_eq!(parse_duty("DUTY burns=1 p50_ms=x p99_ms=1 max_ms=1"), None);
        assert_eq!(parse_duty(""), None);
    }

    #[test]
    fn duty_burns_line() {
        let out = "DUTY burns=3 p50_ms=60.1 p99_ms=104.3 max_ms=104.3 first_ms=61 slowest=x\nDUTY_BURNS 60.1,104.3,59.9\n";
        assert_eq!(parse_duty_burns(out), Some(vec![60.1, 104.3, 59.9]));
        // No burns: the line is there with an empty list.
        assert_eq!(parse_duty_burns("DUTY_BURNS \n"), Some(vec![]));
        assert_eq!(parse_duty_burns("DUTY_BURNS 60.1\r\n"), Some(vec![60.1]));
        for bad in ["DUTY_BURNS 60.1,,61.0", "DUTY_BURNS 60.1,6x", "DUTY_BURNS 60.1,inf", "DUTY_BURNS 60.1,NaN"] {
            assert_eq!(parse_duty_burns(bad), None, "{bad}");
        }
        // The DUTY line alone (a workload from before DUTY_BURNS) has no list.
        assert_eq!(parse_duty_burns("DUTY burns=3 p50_ms=60.1\nDUTY_BURNSX 1.0\n"), None);
    }

    #[test]
    fn gap_lines() {
        let out = "GAP end_ns=5 len_ns=3000000 cpu=1>0\nnoise\nGAP end_ns=9 len_ns=x cpu=0>0\nGAP end_ns=7 len_ns=4\n";
        assert_eq!(
            parse_gaps(out),
            vec![Gap { end_ns: 5, len_ns: 3_000_000, cpus: "1>0" }, Gap { end_ns: 7, len_ns: 4, cpus: "" }]
        );
    }
}
