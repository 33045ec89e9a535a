/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu.weight: hierarchical weighted fairness, flattened onto the one shared
 * vtime queue.
 *
 * CFS shares a contended CPU level by level: at each cgroup, between its
 * runnable tasks and its child cgroups that have runnable work, in proportion
 * to their weights (task weight from nice, cgroup weight from cpu.weight;
 * the defaults, nice 0 and 100, weigh the same). Here that tree is not walked
 * when picking a task. Instead each task's vtime advances by the time it ran
 * divided by its share of the machine, the product of its fractions along the
 * path from the root:
 *
 *   share(task in C) = w(task) / active(C) * w(C) / active(parent(C)) * ...
 *
 * where active(X) is the weight of X's active entities: its runnable tasks
 * and its child cgroups with runnable tasks below them. Tasks that keep their
 * vtimes level in the shared queue then get CPU time in proportion to their
 * shares. The vtime of the machine advances about one ns per ns and CPU.
 *
 * active() is kept exact with two counters per cgroup, changed only when
 * an entity becomes active or inactive (task runnable / quiescent, parked /
 * released, moved, reweighted) and passed up the tree only when a cgroup's
 * count crosses zero. The counters are atomic adds: a task waking or going
 * to sleep in a cgroup that stays active takes no lock (with one lock per
 * cgroup, every wakeup of a busy cgroup's tasks took the same one from every
 * CPU: at 8 vCPUs under TCG, runnable cost 8 times what it cost at 2, where
 * the CPUs' own slowdown is 4). A crossing takes the cgroup's lock and makes
 * what the parent counts agree with the count as it is then (`counted`); the
 * last crossing's look comes after every add, so the parent ends up counting
 * the cgroup exactly when it is active, with the weight it has. The changes
 * from different CPUs may reach a parent out of order; each is a signed sum,
 * so the counts settle on the right values once all have arrived.
 *
 * Like CFS, a throttled group's parked tasks do not count: while throttled,
 * its siblings share as if it had nothing to run.
 *
 * Weights are in CFS's own units (nice 0 = 1024, cpu.weight 100 = 1024), so
 * that nice levels split a CPU exactly as CFS splits it. sched_ext hands a
 * scheduler p->scx.weight instead, the load weight rounded to cgroup units
 * (nice 0 = 100): nice 5 becomes 33 where CFS has 335/1024 = 32.7, nice 19
 * becomes 1 where CFS has 1.46, a third less. The task's weight is taken from
 * its nice level (and SCHED_IDLE) with the kernel's table instead.
 */
#ifndef __SCX_BANDWIDTH_WEIGHT_BPF_H
#define __SCX_BANDWIDTH_WEIGHT_BPF_H

#include "intf.h"

/* The kernel's sched_prio_to_weight: the load weight of nice -20 .. 19. */
static const u32 nice_weights[40] = {
	88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
	9548,  7620,  6100,  4904,  3906,  3121,  2501,  1991,  1586,  1277,
	1024,  820,   655,   526,   423,   335,   272,   215,   172,   137,
	110,   87,    70,    56,    45,    36,    29,    23,    18,    15,
};

#define BW_WEIGHT_NICE_0	1024
#define BW_WEIGHT_IDLEPRIO	3	/* SCHED_IDLE, as CFS weighs it */
#define BW_SCHED_IDLE		5
#define BW_MAX_RT_PRIO		100

/* @p's load weight as CFS computes it. */
static __always_inline u32 task_weight(const struct task_struct *p)
{
	s32 prio = p->static_prio - BW_MAX_RT_PRIO;

	if (p->policy == BW_SCHED_IDLE)
		return BW_WEIGHT_IDLEPRIO;
	if (prio < 0 || prio >= 40)
		return BW_WEIGHT_NICE_0;
	return nice_weights[prio];
}

/* cpu.weight (1..10000, default 100) in load weight units, rounded as CFS does. */
static __always_inline u32 cgroup_weight(u32 cpu_weight)
{
	return ((cpu_weight ?: 100) * BW_WEIGHT_NICE_0 + 50) / 100;
}

/*
 * A cgroup's weight state lives in a slot of an array, found by index: the
 * hot paths (a wakeup, a sleep, a stop, each walking up to the root) pay an
 * array lookup per level instead of hashing the cgroup id (with the
 * hash, cpu.weight was a third of the BPF time of pipe ping-pong). A task
 * holds its cgroup's slot index and the slot's generation; the generation,
 * unique to each occupant, tells a slot since given to another cgroup from
 * its own. Only the cgroup ops (create, remove, reweight, a task's move or
 * chain resolution) map an id to its slot, through a hash.
 */
#define BW_CG_NONE ((u32)-1)

struct cg_ctx {
	/* Serialises weight, contrib and counted. */
	struct bpf_spin_lock lock;
	/* Whether the parent counts this cgroup as active (with contrib). */
	u32 counted;
	/* The occupant's cgroup id; 0 while the slot is free. */
	u64 cgid;
	/* The occupant's generation (cg_gen_next), 0 while free. */
	u32 gen;
	/* Parent's slot and generation; BW_CG_NONE for the root. */
	u32 parent;
	u32 parent_gen;
	/* cpu.weight in load weight units (cgroup_weight). */
	u32 weight;
	/* The weight counted in the parent's active_sum while counted. */
	u32 contrib;
	/* Active entities directly below: runnable tasks and active children (atomic). */
	s64 nr_active;
	/* Their weights (atomic). */
	s64 active_sum;
};

/* Slot -> weight state, for every cgroup with the cpu controller. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BW_MAX_CGROUPS);
	__type(key, u32);
	__type(value, struct cg_ctx);
} cg_ctxs SEC(".maps");

/* cgroup id -> its slot in cg_ctxs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, BW_MAX_CGROUPS);
	__type(key, u64);
	__type(value, u32);
} cg_slots SEC(".maps");

/* Where the search for a free slot starts; the next generation to give out. */
static u32 cg_cursor;
static u32 cg_gen_next;

/*
 * What the root's runnable tasks heavier than nice 0 weigh above it, summed
 * (atomic). The root's fraction leaves it out (cg_share): the root's active
 * weight scales every task's charge alike at one moment, but is taken at
 * each charge, and a nice -20 kernel thread (weight 88761) runnable for a few
 * ms made every task charged meanwhile advance 89 times too far, for good.
 * The serial console's printer, woken by every CPU hotplug message, did
 * that every 500 ms: a limited group's hog then waited 0.5-0.8 s for a CPU
 * while its sibling caught up (the kernel's scheduler: 50-90 ms). Counted
 * as nice 0 there, such a task still weighs its own weight in its share.
 */
static s64 root_heavy_excess;

/* Slot @idx if it still holds the occupant of generation @gen. */
static __always_inline struct cg_ctx *cg_at(u32 idx, u32 gen)
{
	struct cg_ctx *c;

	if (!gen)
		return NULL;
	c = bpf_map_lookup_elem(&cg_ctxs, &idx);
	return c && READ_ONCE(c->gen) == gen ? c : NULL;
}

/*
 * What a task of weight @w in the cgroup of slot @idx (generation @gen) adds
 * to root_heavy_excess. The slot is looked up only for a heavy task: the
 * common nice-0 wakeup and sleep pay nothing for it.
 */
static __always_inline s64 heavy_excess(u32 idx, u32 gen, s64 w)
{
	struct cg_ctx *c;

	if (w <= BW_WEIGHT_NICE_0)
		return 0;
	c = cg_at(idx, gen);
	return c && READ_ONCE(c->parent) == BW_CG_NONE ? w - BW_WEIGHT_NICE_0 : 0;
}

/*
 * The weight state of cgroup @cgid, with its slot index and generation in
 * @idx and @gen; NULL (and @gen 0) if it has none.
 */
static struct cg_ctx *cg_find(u64 cgid, u32 *idx, u32 *gen)
{
	u32 *i = cgid ? bpf_map_lookup_elem(&cg_slots, &cgid) : NULL;
	struct cg_ctx *c;

	*gen = 0;
	if (!i)
		return NULL;
	*idx = *i;
	c = bpf_map_lookup_elem(&cg_ctxs, idx);
	if (!c || READ_ONCE(c->cgid) != cgid)
		return NULL;
	*gen = READ_ONCE(c->gen);
	return *gen ? c : NULL;
}

/* The task now belongs to cgroup @cgid (0: none known): its slot, for cg_activate. */
static void cg_bind(struct task_ctx *tctx, u64 cgid)
{
	u32 idx = 0, gen;

	cg_find(cgid, &idx, &gen);
	tctx->cg_idx = idx;
	tctx->cg_gen = gen;
}

/*
 * Add @dnr entities of total weight @dw to the cgroup in slot @idx (of
 * generation @gen), and pass the change on to its ancestors as long as a
 * cgroup becomes active or inactive (or its counted weight changes, @dnr == 0).
 */
static void cg_apply(u32 idx, u32 gen, s64 dnr, s64 dw)
{
	s32 lvl;

	bpf_for(lvl, 0, BW_MAX_LEVEL + 1) {
		struct cg_ctx *c;
		s64 old, pdnr = 0, pdw = 0;
		u32 parent, parent_gen;

		if (idx == BW_CG_NONE || (!dnr && !dw))
			break;
		c = cg_at(idx, gen);
		if (!c)
			break;
		if (dw)
			__sync_fetch_and_add(&c->active_sum, dw);
		if (!dnr)
			break;
		old = __sync_fetch_and_add(&c->nr_active, dnr);
		if ((old > 0) == (old + dnr > 0))
			break;
		/* Crossed zero: what the parent counts follows the count as it is now. */
		bpf_spin_lock(&c->lock);
		if (READ_ONCE(c->nr_active) > 0) {
			if (!c->counted) {
				c->counted = 1;
				c->contrib = c->weight;
				pdnr = 1;
				pdw = c->contrib;
			}
		} else if (c->counted) {
			c->counted = 0;
			pdnr = -1;
			pdw = -(s64)c->contrib;
		}
		parent = c->parent;
		parent_gen = c->parent_gen;
		bpf_spin_unlock(&c->lock);
		idx = parent;
		gen = parent_gen;
		dnr = pdnr;
		dw = pdw;
	}
}

/* @p becomes an active entity of its cgroup (tctx->cg_* must be current). */
static __always_inline void cg_activate(struct task_struct *p, struct task_ctx *tctx)
{
	s64 excess;

	if (tctx->act_gen || !tctx->cg_gen)
		return;
	tctx->act_idx = tctx->cg_idx;
	tctx->act_gen = tctx->cg_gen;
	tctx->act_weight = task_weight(p);
	excess = heavy_excess(tctx->act_idx, tctx->act_gen, tctx->act_weight);
	if (excess)
		__sync_fetch_and_add(&root_heavy_excess, excess);
	cg_apply(tctx->act_idx, tctx->act_gen, 1, tctx->act_weight);
}

static __always_inline void cg_deactivate(struct task_ctx *tctx)
{
	u32 gen = tctx->act_gen;
	s64 excess;

	if (!gen)
		return;
	tctx->act_gen = 0;
	excess = heavy_excess(tctx->act_idx, gen, tctx->act_weight);
	if (excess)
		__sync_fetch_and_sub(&root_heavy_excess, excess);
	cg_apply(tctx->act_idx, gen, -1, -(s64)tctx->act_weight);
}

/* A task's weight changed (nice): count the new one. */
static __always_inline void cg_reweight_task(struct task_struct *p, struct task_ctx *tctx)
{
	u32 weight = task_weight(p);
	s64 dw = (s64)weight - tctx->act_weight, dx;

	if (!tctx->act_gen)
		return;
	dx = heavy_excess(tctx->act_idx, tctx->act_gen, weight) -
	     heavy_excess(tctx->act_idx, tctx->act_gen, tctx->act_weight);
	if (dx)
		__sync_fetch_and_add(&root_heavy_excess, dx);
	tctx->act_weight = weight;
	cg_apply(tctx->act_idx, tctx->act_gen, 0, dw);
}

/* cpu.weight of @cgid changed: if it is active, its parent counts the new one. */
static void cg_reweight(u64 cgid, u32 cpu_weight)
{
	u32 weight = cgroup_weight(cpu_weight), idx, gen, parent, parent_gen;
	struct cg_ctx *c;
	s64 dw = 0;

	if (!(c = cg_find(cgid, &idx, &gen)))
		return;
	bpf_spin_lock(&c->lock);
	c->weight = weight;
	if (c->counted) {
		dw = (s64)weight - c->contrib;
		c->contrib = weight;
	}
	parent = c->parent;
	parent_gen = c->parent_gen;
	bpf_spin_unlock(&c->lock);
	cg_apply(parent, parent_gen, 0, dw);
}

/*
 * A new cgroup (or one existing at attach, parents first): claims a free slot,
 * searching from where the last search ended. A slot freed by cg_destroy is
 * thus taken again only after every other slot was tried, and a new occupant
 * has a new generation anyway.
 */
static void cg_create(struct cgroup *cgrp, u32 cpu_weight)
{
	u32 weight = cgroup_weight(cpu_weight), parent = BW_CG_NONE, parent_gen = 0, gen, i;
	u64 cgid = cgrp->kn->id;

	if (cgrp->level > 0) {
		struct cgroup *p = bpf_cgroup_ancestor(cgrp, cgrp->level - 1);

		if (p) {
			if (!cg_find(p->kn->id, &parent, &parent_gen))
				parent = BW_CG_NONE;
			bpf_cgroup_release(p);
		}
	}
	gen = __sync_fetch_and_add(&cg_gen_next, 1) + 1;
	if (!gen)	/* 0 means free: skip it on wrap-around */
		gen = __sync_fetch_and_add(&cg_gen_next, 1) + 1;
	bpf_for(i, 0, BW_MAX_CGROUPS) {
		u32 idx = __sync_fetch_and_add(&cg_cursor, 1) & (BW_MAX_CGROUPS - 1);
		struct cg_ctx *c = bpf_map_lookup_elem(&cg_ctxs, &idx);

		if (!c)
			break;
		if (__sync_val_compare_and_swap(&c->cgid, 0, cgid) != 0)
			continue;
		bpf_spin_lock(&c->lock);
		c->counted = 0;
		c->parent = parent;
		c->parent_gen = parent_gen;
		c->weight = weight;
		c->contrib = weight;
		bpf_spin_unlock(&c->lock);
		WRITE_ONCE(c->nr_active, 0);
		WRITE_ONCE(c->active_sum, 0);
		WRITE_ONCE(c->gen, gen);
		if (!bpf_map_update_elem(&cg_slots, &cgid, &idx, BPF_NOEXIST))
			return;
		WRITE_ONCE(c->gen, 0);
		WRITE_ONCE(c->cgid, 0);
		break;
	}
	/*
	 * Out of room: the cgroup's tasks count in no cgroup and run with the
	 * weight of their nice level alone. Counted, never fatal (failing here
	 * would fail the mkdir, or the attach).
	 */
	stat_inc(BW_STAT_UNWEIGHTED);
}

/*
 * A cgroup going away. It has no live task left, but an exiting one may still
 * be counted in it (a task leaves its cgroup in do_exit, before its last trip
 * through the scheduler): take what it counts for out of the parent now, as
 * that task's own deactivation will find the slot's generation changed and
 * pass nothing on.
 */
static void cg_destroy(struct cgroup *cgrp)
{
	u64 cgid = cgrp->kn->id;
	u32 idx, gen, parent, parent_gen;
	struct cg_ctx *c;
	s64 dw = 0, dnr = 0;

	if (!(c = cg_find(cgid, &idx, &gen)))
		return;
	bpf_map_delete_elem(&cg_slots, &cgid);
	bpf_spin_lock(&c->lock);
	if (c->counted) {
		dnr = -1;
		dw = -(s64)c->contrib;
	}
	c->counted = 0;
	parent = c->parent;
	parent_gen = c->parent_gen;
	bpf_spin_unlock(&c->lock);
	WRITE_ONCE(c->gen, 0);
	WRITE_ONCE(c->nr_active, 0);
	WRITE_ONCE(c->cgid, 0);
	cg_apply(parent, parent_gen, dnr, dw);
}

/*
 * The task's share of the machine in BW_SHARE_ONE units: its fraction of its
 * cgroup's active weight times the cgroup's fraction of its parent's, up to
 * the root; 0 when its cgroup has no weight state. Counters in flight between
 * CPUs may briefly be off; a fraction below the root never exceeds one, the
 * root's may for a task heavier than nice 0 (root_heavy_excess).
 */
static u64 cg_share(struct task_ctx *tctx)
{
	u64 share = BW_SHARE_ONE;
	u32 idx = tctx->act_idx, gen = tctx->act_gen;
	s64 w = tctx->act_weight;
	s32 lvl;

	bpf_for(lvl, 0, BW_MAX_LEVEL + 1) {
		struct cg_ctx *c = cg_at(idx, gen);
		s64 sum;

		if (!c) {
			if (!lvl)
				return 0;
			break;
		}
		sum = READ_ONCE(c->active_sum);
		if (READ_ONCE(c->parent) == BW_CG_NONE) {
			/*
			 * At the root its heavy tasks count as nice 0
			 * (root_heavy_excess); one of them may then weigh
			 * more than the sum: its share exceeds one, by as much
			 * as its weight says.
			 */
			sum -= READ_ONCE(root_heavy_excess);
			if (sum > 0 && w > 0)
				share = share * w / sum;
			break;
		}
		if (sum > w && w > 0)
			share = share * w / sum;
		w = READ_ONCE(c->contrib);
		idx = READ_ONCE(c->parent);
		gen = READ_ONCE(c->parent_gen);
		if (idx == BW_CG_NONE)
			break;
	}
	return share ?: 1;
}

#endif /* __SCX_BANDWIDTH_WEIGHT_BPF_H */
