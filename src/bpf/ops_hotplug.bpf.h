/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The CPU hotplug ops of the scheduling core (main.bpf.c includes this
 * file). They exist because without them the kernel unloads a sched_ext
 * scheduler at the first CPU going offline or online; what they do for
 * bandwidth control is bw_reclaim_cpu (bw_hotplug.bpf.h).
 */
#ifndef __SCX_OPS_HOTPLUG_BPF_H
#define __SCX_OPS_HOTPLUG_BPF_H

/*
 * CPU hotplug. Implementing these keeps the scheduler attached across hotplug
 * (without them the kernel unloads it). Tasks on a CPU going away are moved by
 * the kernel; its local runtime goes back to the pools here, and it stops
 * kicking (see cpu_going_down). The agent re-reads the topology (which LLC
 * the CPU belongs to) when bw_hotplug_seq moved.
 */
void BPF_STRUCT_OPS(bw_cpu_online, s32 cpu)
{
	bw_reclaim_cpu(cpu);
	bw_set_going_down(cpu, 0);
	__sync_fetch_and_add(&bw_hotplug_seq, 1);
}

void BPF_STRUCT_OPS(bw_cpu_offline, s32 cpu)
{
	bw_set_going_down(cpu, 1);
	bw_reclaim_cpu(cpu);
	__sync_fetch_and_add(&bw_hotplug_seq, 1);
}

#endif /* __SCX_OPS_HOTPLUG_BPF_H */
