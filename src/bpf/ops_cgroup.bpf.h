/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The cgroup ops of the scheduling core (main.bpf.c includes this file).
 * They keep two things in step with the kernel's cgroup tree: the weight
 * state of weight.bpf.h (cg_create, cg_destroy, cg_reweight, and a moving
 * task's place in it) and what the agent knows of limits set in cgroupfs
 * (cpu.max, cpu.max.burst) and of limited cgroups removed, which BPF only
 * passes on as events (src/scheduler/events.rs); the agent owns the pools. A
 * moved task's chain of limited groups is resolved again at its next use
 * (BW_GEN_STALE), and creations and removals bump bw_cgroup_seq so that the
 * agent walks its configured paths again (src/scheduler/cgroup_watch.rs).
 */
#ifndef __SCX_OPS_CGROUP_BPF_H
#define __SCX_OPS_CGROUP_BPF_H

void BPF_STRUCT_OPS(bw_cgroup_move, struct task_struct *p, struct cgroup *from,
		    struct cgroup *to)
{
	struct task_ctx *tctx = task_ctx(p);

	if (!tctx)
		return;
	tctx->gen = BW_GEN_STALE;
	/* A runnable task takes its weight along. */
	cg_bind(tctx, to->kn->id);
	if (tctx->act_gen) {
		cg_deactivate(tctx);
		cg_activate(p, tctx);
	}
}

/*
 * cpu.max and cpu.max.burst: the kernel hands every cgroup's values to
 * cgroup_init (at attach and on creation) and each change to
 * cgroup_set_bandwidth (kernels with that op). The agent owns pools and
 * timers, so these only pass the values on; the agent applies them (a
 * configured limit takes precedence).
 */
s32 BPF_STRUCT_OPS(bw_cgroup_init, struct cgroup *cgrp, struct scx_cgroup_init_args *args)
{
	u64 quota = (u64)-1, period = 0, burst = 0;

	__sync_fetch_and_add(&bw_cgroup_seq, 1);
	cg_create(cgrp, args->weight);
	if (bpf_core_field_exists(args->bw_quota_us)) {
		quota = args->bw_quota_us;
		period = args->bw_period_us;
		burst = args->bw_burst_us;
	}
	/* Unlimited cgroups are the common case: nothing to tell, unless a rule may limit them. */
	if (cgrp->level > 0 && (quota != (u64)-1 || bw_report_unlimited))
		bw_emit(BW_EV_LIMIT, 0, cgrp->kn->id, period, quota, burst);
	return 0;
}

void BPF_STRUCT_OPS(bw_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us,
		    u64 quota_us, u64 burst_us)
{
	if (cgrp->level > 0)
		bw_emit(BW_EV_LIMIT, 0, cgrp->kn->id, period_us, quota_us, burst_us);
}

void BPF_STRUCT_OPS(bw_cgroup_exit, struct cgroup *cgrp)
{
	u64 cgid = cgrp->kn->id;
	u32 *slot = bpf_map_lookup_elem(&cgid_slot, &cgid);

	__sync_fetch_and_add(&bw_cgroup_seq, 1);
	cg_destroy(cgrp);
	if (slot)
		bw_emit(BW_EV_EXIT, *slot, cgid, 0, 0, 0);
}

void BPF_STRUCT_OPS(bw_cgroup_set_weight, struct cgroup *cgrp, u32 weight)
{
	cg_reweight(cgrp->kn->id, weight);
}

#endif /* __SCX_OPS_CGROUP_BPF_H */
