//! Task migrations as the kernel records them: the `sched/sched_migrate_task` trace event
//! (tracefs), which fires in set_task_cpu() whichever scheduler class moved the task, so
//! the kernel's scheduler and scx_bandwidth are counted the same way.

use std::fs;
use std::path::Path;

const TRACEFS: &str = "/sys/kernel/tracing";
const EVENT: &str = "events/sched/sched_migrate_task/enable";
/// Per-CPU ring buffer: a migration record is ~50 bytes, so 4 MiB per CPU holds tens of
/// thousands; `stop` fails if any were overwritten all the same.
const BUFFER_KB: &str = "4096";

/// One migration: (pid, from CPU, to CPU).
pub type Migration = (u32, usize, usize);

fn write(file: &str, value: &str) -> Result<(), String> {
    fs::write(format!("{TRACEFS}/{file}"), value)
        .map_err(|e| format!("writing '{value}' to {TRACEFS}/{file}: {e}"))
}

fn mount_tracefs() -> Result<(), String> {
    if Path::new(TRACEFS).join("trace").exists() {
        return Ok(());
    }
    let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
    let (src, dst, ty) = (c("tracefs"), c(TRACEFS), c("tracefs"));
    // SAFETY: valid NUL-terminated strings, no mount data.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(format!(
            "mounting tracefs at {TRACEFS}: {} (the kernel needs CONFIG_TRACING)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Recording of sched_migrate_task events from `start` to `stop`; recording is switched
/// off when dropped.
pub struct MigrateTrace {
    on: bool,
}

impl MigrateTrace {
    pub fn start() -> Result<Self, String> {
        mount_tracefs()?;
        write("tracing_on", "0")?;
        write("events/enable", "0")?;
        write("buffer_size_kb", BUFFER_KB)?;
        write("trace", "")?; // opening with O_TRUNC empties the buffer
        write(EVENT, "1")?;
        write("tracing_on", "1")?;
        Ok(Self { on: true })
    }

    /// Stops recording and returns every migration recorded; an error if the buffer lost any.
    pub fn stop(mut self) -> Result<Vec<Migration>, String> {
        self.off();
        let lost = overruns();
        if lost > 0 {
            return Err(format!("the trace buffer overwrote {lost} events ({BUFFER_KB} KiB per CPU)"));
        }
        let text = fs::read_to_string(format!("{TRACEFS}/trace"))
            .map_err(|e| format!("reading {TRACEFS}/trace: {e}"))?;
        Ok(parse(&text))
    }

    fn off(&mut self) {
        if self.on {
            let _ = write("tracing_on", "0");
            let _ = write(EVENT, "0");
            self.on = false;
        }
    }
}

impl Drop for MigrateTrace {
    fn drop(&mut self) {
        self.off();
    }
}

/// Events overwritten in the ring buffer, summed over CPUs (per_cpu/cpuN/stats "overrun:").
fn overruns() -> u64 {
    let Ok(rd) = fs::read_dir(format!("{TRACEFS}/per_cpu")) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path().join("stats")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.strip_prefix("overrun:").and_then(|v| v.trim().parse::<u64>().ok()))
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The migrations in a `trace` text: lines "… sched_migrate_task: comm=… pid=P prio=…
/// orig_cpu=A dest_cpu=B".
fn parse(text: &str) -> Vec<Migration> {
    text.lines()
        .filter_map(|l| l.split_once("sched_migrate_task:").map(|(_, rest)| rest))
        .filter_map(|rest| {
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|t| t.strip_prefix(k))
                    .and_then(|v| v.parse::<usize>().ok())
            };
            Some((field("pid=")? as u32, field("orig_cpu=")?, field("dest_cpu=")?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_migrate_events_and_skips_the_rest() {
        let text = "# tracer: nop\n\
            #           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
            \x20         <idle>-0       [004] d.s3.   12.345678: sched_migrate_task: comm=hog pid=123 prio=120 orig_cpu=0 dest_cpu=4\n\
            \x20           hog-124     [001] d..2.   12.400000: sched_migrate_task: comm=my hog pid=124 prio=120 orig_cpu=1 dest_cpu=2\n\
            \x20           hog-124     [001] d..2.   12.400001: sched_switch: prev_comm=hog prev_pid=124\n";
        assert_eq!(parse(text), vec![(123, 0, 4), (124, 1, 2)]);
    }
}
