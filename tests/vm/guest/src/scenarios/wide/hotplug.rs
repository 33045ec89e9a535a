//! CPU hotplug on the second node under limits (`wide_hotplug`).

use super::*;
use crate::scenarios::hotplug::{kernel_then_ours, prepare, HotplugRuns, HotplugSetup};

/// CPU 4 (the first of the second node) goes offline and online. (cgroup, limit in CPUs,
/// period, hog threads): two groups throttled most of the time, and one whose five hogs never reach
/// its limit, so most CPUs, the hot-plugged one too, hold a slice of its runtime when they
/// go offline. 5.6 CPUs wanted of the 7-8 online.
const SETUP: HotplugSetup = HotplugSetup {
    cpu: 4,
    groups: &[("t/a", 0.3, 100_000, 2), ("t/b", 0.3, 100_000, 2), ("t/c", 6.0, 100_000, 5)],
    check_unthrottled: true,
    hog_wait_slack_ms: None,
};
/// Most CPUs that may idle beside t/c's waiting hogs over the loop (`idle_beside_waiting`,
/// CPU-seconds per second). In 5 runs at 8 vCPUs the kernel's scheduler had 0.016-0.065,
/// ours 0.027-0.054: the moments between a CPU going idle and taking a task. Twice the
/// largest; a hog stranded in a queue no CPU looks at for 2 s of the 20 s loop exceeds it.
const BESIDE_MAX_CPUS: f64 = 0.1;

/// CPU hotplug on the second node with limits set through cpu.max, under the kernel's
/// scheduler and then under scx_bandwidth in the same boot (scenarios/hotplug.rs). CPU 4
/// goes offline and online every 500 ms for 20 s. With 8 vCPUs on 2 host cores no group
/// reaches its limit in full under either scheduler: the kernel's figures are the
/// reference. Checked for ours, besides `check_against_kernel`: t/c's hogs waited beside
/// idle CPUs for at most BESIDE_MAX_CPUS (work conservation, from the sched_switch trace;
/// the kernel's figure is printed beside), and the topology still has 2 LLC queues.
pub(super) fn wide_hotplug(ctx: &mut Ctx) -> Result<(), String> {
    require_wide()?;
    let _back = prepare(&SETUP)?;
    let Some(HotplugRuns { kernel: kr, ours: or, before, after }) = kernel_then_ours(ctx, &SETUP)? else {
        return Ok(());
    };
    let llcs = crate::stats::num(&after, "llc_queues")?;
    ctx.figure("llc_queues", llcs);
    let poll = crate::stats::delta(&before, &after, "agent_poll_cpu_usec")?;
    ctx.figure("agent_poll_ms", format!("{:.1}", poll / 1e3));
    if or.idle_beside_waiting > BESIDE_MAX_CPUS {
        ctx.fail(format!(
            "t/c's hogs waited beside {:.3} idle CPUs on average over the hotplug loop (max {BESIDE_MAX_CPUS}; the kernel's scheduler {:.3})",
            or.idle_beside_waiting, kr.idle_beside_waiting
        ));
    }
    if llcs != 2.0 {
        ctx.fail(format!("{llcs} LLC queues after hotplug on a machine of 2 LLCs"));
    }
    Ok(())
}
