/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The chain: which limited groups charge a task. As in the kernel, a task is
 * limited by its own cgroup and by every ancestor that has a limit. Walking
 * the cgroup tree on every charge would cost a lookup per level per tick, so
 * the slots are resolved once and cached in task_ctx until the task moves
 * (ops.cgroup_move marks it stale) or the agent changes which cgroups are
 * limited (bw_cfg_gen). Only an op that has the task as its argument may
 * resolve it (scx_bpf_task_cgroup()), which is why dispatch in main.bpf.c
 * checks for a stale chain instead of refreshing it.
 */
#ifndef __SCX_BW_CHAIN_BPF_H
#define __SCX_BW_CHAIN_BPF_H

/* weight.bpf.h: the task's cgroup, for its weight state. */
static void cg_bind(struct task_ctx *tctx, u64 cgid);

/*
 * Resolve @p's chain of limited groups from its cgroup's ancestry. Only
 * callable where @p is an argument of the running op (scx_bpf_task_cgroup()).
 */
static void bw_resolve_chain(struct task_struct *p, struct task_ctx *tctx)
{
	u64 gen = bw_cfg_gen;
	struct cgroup *cgrp;
	u32 n = 0;
	int level;

	cgrp = scx_bpf_task_cgroup(p);
	if (!cgrp) {
		cg_bind(tctx, 0);
		tctx->nr_chain = 0;
		tctx->gen = gen;
		return;
	}
	cg_bind(tctx, cgrp->kn->id);
	level = cgrp->level;
	/* The agent is never limited (but its weight counts in its cgroup). */
	if (p->tgid == agent_tgid)
		level = 0;

	/* The root cgroup (level 0) cannot be limited. */
	s32 i;
	bpf_for(i, 1, BW_MAX_LEVEL + 1) {
		struct cgroup *anc;
		u32 *slot;
		u64 id;

		if (i > level)
			break;
		anc = bpf_cgroup_ancestor(cgrp, i);
		if (!anc)
			break;
		id = anc->kn->id;
		bpf_cgroup_release(anc);

		slot = bpf_map_lookup_elem(&cgid_slot, &id);
		if (!slot)
			continue;
		if (n >= BW_MAX_CHAIN) {
			/*
			 * The agent refuses deeper nesting in its config, but
			 * cpu.max can be written at any depth (also in a
			 * delegated subtree). Keep the outermost limits, the
			 * ones closest to the machine's owner, and count it:
			 * the agent reports it as an error.
			 */
			stat_inc(BW_STAT_DEEP);
			break;
		}
		tctx->chain[n & (BW_MAX_CHAIN - 1)] = *slot;
		n++;
	}
	bpf_cgroup_release(cgrp);

	tctx->nr_chain = n;
	tctx->gen = gen;
}

static __always_inline void bw_refresh_chain(struct task_struct *p, struct task_ctx *tctx)
{
	if (tctx->gen != bw_cfg_gen)
		bw_resolve_chain(p, tctx);
}

#endif /* __SCX_BW_CHAIN_BPF_H */
