/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPU hotplug. Local runtime lives per CPU: a CPU that goes offline would
 * keep what it holds out of its groups' pools until it came back, and one
 * coming back may hold what a task charged after the offline callback. Both
 * callbacks (bw_cpu_offline and bw_cpu_online in main.bpf.c) give it back
 * through the slack path and stop a throttle clock the CPU left running. A
 * debt stays with the CPU, which pays it with its next pull.
 */
#ifndef __SCX_BW_HOTPLUG_BPF_H
#define __SCX_BW_HOTPLUG_BPF_H

/*
 * @cpu goes offline or comes online: whatever local runtime it holds goes
 * back to the pools (an offline CPU would strand it; one coming back may hold
 * what a task charged after the offline callback), and a throttle clock it
 * left running stops. A debt (negative local runtime) stays: the CPU pays it
 * with its next pull. Runs on @cpu, but a tick may charge in between, hence
 * the cmpxchg.
 */
static void bw_reclaim_cpu(s32 cpu)
{
	u64 now = bpf_ktime_get_ns();
	u32 slot;

	stat_inc(BW_STAT_HOTPLUG);
	bpf_for(slot, 0, bw_slots()) {
		struct bw_cpu *c = bpf_map_lookup_percpu_elem(&bw_cpus, &slot, cpu);
		struct bw_group *g;
		s64 rt;
		u64 at;

		if (!c)
			break;
		rt = READ_ONCE(c->runtime);
		at = READ_ONCE(c->throttled_at);
		if (rt <= 0 && !at)
			continue;
		g = bw_group(slot);
		if (!g)
			continue;
		bw_stop_clock(g, c, now);
		if (rt > 0 && __sync_val_compare_and_swap(&c->runtime, rt, 0) == rt) {
			stat_add(BW_STAT_HOTPLUG_NS, rt);
			bw_give_back(g, slot, rt);
		}
	}
}

#endif /* __SCX_BW_HOTPLUG_BPF_H */
