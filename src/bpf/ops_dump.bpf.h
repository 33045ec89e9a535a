/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the scheduler adds to the kernel's debug dump (main.bpf.c includes
 * this file): when sched_ext exits on an error, or on SysRq-D, the dump shows
 * every limited group's limit, pool, throttle state and per-CPU local
 * runtime, and for each task how many limited groups its chain holds and the
 * first of them, so that an ejection report says which group held what.
 */
#ifndef __SCX_OPS_DUMP_BPF_H
#define __SCX_OPS_DUMP_BPF_H

/* The exit dump shows every limited group's pool and throttle state. */
void BPF_STRUCT_OPS(bw_dump, struct scx_dump_ctx *dctx)
{
	scx_bpf_dump("scx_bandwidth: cfg_gen=%llu vtime_now=%llu\n", bw_cfg_gen, vtime_now);
	s32 slot;
	bpf_for(slot, 0, bw_slots()) {
		struct bw_group *g = bw_group(slot);

		if (!g || !g->cgid)
			continue;
		scx_bpf_dump("group[%d] cgid=%llu quota=%llu period=%llu burst=%llu\n",
			     slot, g->cgid, g->quota, g->period, g->burst);
		scx_bpf_dump("  refilled_at=%llu safety_refills=%llu\n", g->refilled_at, g->nr_safety_refills);
		scx_bpf_dump("  pool=%lld throttled=%u slack_pending=%u parked_now=%d usage=%llu throttled_time=%llu\n",
			     g->runtime, g->throttled, g->slack_pending,
			     scx_bpf_dsq_nr_queued(BW_PARK_DSQ_BASE + slot),
			     g->usage, g->throttled_time);
		s32 cpu;
		bpf_for(cpu, 0, nr_cpu_ids) {
			struct bw_cpu *c = bpf_map_lookup_percpu_elem(&bw_cpus, &slot, cpu);

			if (c && (c->runtime || c->throttled_at))
				scx_bpf_dump("  cpu%d local=%lld throttled_at=%llu\n",
					     cpu, c->runtime, c->throttled_at);
		}
	}
}

void BPF_STRUCT_OPS(bw_dump_task, struct scx_dump_ctx *dctx, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);

	if (!tctx)
		return;
	scx_bpf_dump("bw: gen=%llu chain=%u first_slot=%d\n", tctx->gen, tctx->nr_chain,
		     tctx->nr_chain ? (s32)chain_slot(tctx, 0) : -1);
}

#endif /* __SCX_OPS_DUMP_BPF_H */
