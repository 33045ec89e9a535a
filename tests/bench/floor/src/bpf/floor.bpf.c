/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scxbw_floor: the least a sched_ext scheduler does, as a yardstick for the
 * benchmarks (tests/bench): run in the same boot as scx_bandwidth and the
 * kernel's own scheduler, it shows what sched_ext itself costs beside the
 * kernel's, and so how much of scx_bandwidth's gap is its own.
 *
 * A waking task goes to the idle CPU the kernel's default selection finds,
 * straight into that CPU's local queue; any other task waits in the one
 * global FIFO queue, which the kernel serves without a dispatch op. No
 * fairness, no cgroup state, no limits: the shape of the field's scx_simple in
 * its FIFO mode, not a scheduler to run a machine with.
 */
#include <scx/common.bpf.h>

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

s32 BPF_STRUCT_OPS(fl_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);

	if (is_idle)
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, SCX_SLICE_DFL, 0);
	return cpu;
}

void BPF_STRUCT_OPS(fl_enqueue, struct task_struct *p, u64 enq_flags)
{
	scx_bpf_dsq_insert(p, SCX_DSQ_GLOBAL, SCX_SLICE_DFL, enq_flags);
}

void BPF_STRUCT_OPS(fl_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(floor_ops,
	       .select_cpu	= (void *)fl_select_cpu,
	       .enqueue		= (void *)fl_enqueue,
	       .exit		= (void *)fl_exit,
	       .name		= "scxbw_floor");
