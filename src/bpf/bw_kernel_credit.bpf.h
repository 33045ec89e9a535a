/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel credit: the one exception to parking. A task preempted inside the
 * kernel may hold what the whole machine waits for (a lock that cgroup moves
 * and forks need, an RCU read-side section); parked until its group's
 * refill, it held them up for as long (the measurements are below). fair.c
 * avoids this by throttling only on the way back to user mode, which BPF
 * cannot do, so such a task runs on credit instead, within a bounded debt
 * (BW_DEBT_MAX_NS) that the next refill pays first. The probes here read what
 * the task's state shows: its system call (fork, exec, exit), its RCU
 * nesting, the page-fault mark of CONFIG_LRU_GEN.
 */
#ifndef __SCX_BW_KERNEL_CREDIT_BPF_H
#define __SCX_BW_KERNEL_CREDIT_BPF_H

/*
 * Throttled tasks that hold the whole kernel up are not parked. We park a task
 * of a throttled group wherever it was preempted, and some places make every
 * cgroup move on the machine wait until its group's refill (964-1,001 ms
 * beside a forking group with a 1 s period; 248-500 ms with a 250 ms period
 * while any of these was still parked, measured 2026-12-01):
 *  - fork (copy_process, from cgroup_can_fork to cgroup_post_fork) holds
 *    the read side of cgroup_threadgroup_rwsem, which a move takes for
 *    writing, and behind the waiting mover every new fork waits too; so
 *    does exit, briefly, before the task is PF_EXITING;
 *    exec holds its process's cred_guard_mutex and mm; a page fault holds
 *    the mm's or VMA's lock that a sibling thread's fork waits for;
 *  - an RCU read-side section (preemptible RCU: a task preempted in a page
 *    fault's page table walk, in a lockless lookup) holds up every grace
 *    period, and a move waits for one. The kernel's RCU priority boosting
 *    would lift such a task; Debian builds without it.
 * The kernel's CFS stops a throttled task only on its way back to user mode.
 * BPF cannot stop a task there: a task work (bpf_task_work) runs with
 * migration disabled, a kick from it preempts the task inside it, and such a
 * task goes straight back to its CPU without enqueue; a timer stops it too
 * late, often inside a new system call (tried 2026-12-01). So such a task
 * runs on credit, a short slice at a time, until it is caught outside: its
 * CPU's local runtime goes negative. Where that would take what the group's
 * CPUs owe past BW_DEBT_MAX_NS (BW_DEBT_HELD_MAX_NS for RCU readers and for
 * tasks a refill released after a refusal) it parks wherever it is, as
 * before, so what a group gets over any time is off by at most the larger
 * bound and what its exiting tasks ran. The next refill pays the debts first
 * (bw_pay_debts) and releases such tasks ahead of all others.
 */

/*
 * Whether @p is inside fork's cgroup_threadgroup_rwsem section, exec or exit.
 * The system call number its entry into the kernel saved (-1 after an
 * interrupt or exception) names the call; a fork counts only inside the
 * section (tctx->in_fork). Most of a fork's time is spent before it
 * (copying the memory map, files, credentials), holding nothing that anyone
 * outside the process waits for, and a child that has not run yet shows its
 * parent's saved clone; credited whole, the forks of a fork-heavy group used
 * up its debt bound and the RCU readers among them then parked (a cgroup
 * move waiting a whole period for its grace period). x86-64 only, and not
 * for 32-bit compat calls. @p must be a trusted pointer.
 */
static __always_inline bool bw_in_fork_exec_exit(struct task_struct *p, struct task_ctx *tctx)
{
#if defined(__TARGET_ARCH_x86)
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(p);
	long nr;

	if (!regs)
		return false;
	nr = regs->orig_ax;
	if (nr == 56 /* clone */ || nr == 57 /* fork */ || nr == 58 /* vfork */ ||
	    nr == 435 /* clone3 */)
		return tctx->in_fork;
	return nr == 59 /* execve */ || nr == 60 /* exit */ || nr == 231 /* exit_group */ ||
	       nr == 322 /* execveat */;
#else
	return false;
#endif
}

/*
 * Fork's rwsem section: cgroup_can_fork takes cgroup_threadgroup_rwsem for
 * reading first thing, and the child first wakes (ops.runnable, from
 * wake_up_new_task in the parent) after cgroup_post_fork released it. The
 * mark must be on from the start: a fork that waited for the rwsem behind a
 * cgroup move is woken holding it, and parked then, held up the next move
 * until its group's refill (marked from ops.init_task, later in the section,
 * a move still waited a period in 2 of 5 runs). A fork that fails in the
 * section leaves the mark on until the next child wakes; it only counts
 * while the task is inside a fork call (above).
 */
SEC("fentry/cgroup_can_fork")
int BPF_PROG(bw_fork_section_enter, struct task_struct *child, struct kernel_clone_args *kargs)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct task_ctx *ptctx = bpf_task_storage_get(&task_ctxs, cur, 0, 0);

	if (ptctx)
		ptctx->in_fork = 1;
	return 0;
}

static __always_inline void bw_fork_section_leave(struct task_struct *child)
{
	struct task_struct *cur;
	struct task_ctx *ptctx;

	if (child->se.sum_exec_runtime)
		return;
	cur = bpf_get_current_task_btf();
	if (cur == child)
		return;
	ptctx = bpf_task_storage_get(&task_ctxs, cur, 0, 0);
	if (ptctx)
		ptctx->in_fork = 0;
}

/* Whether @p is inside an RCU read-side section (preemptible RCU). */
static __always_inline bool bw_in_rcu_read_section(struct task_struct *p)
{
	/* The BPF trampoline running this program holds one for current. */
	int own = p == bpf_get_current_task_btf() ? 1 : 0;

	if (bpf_core_field_exists(p->rcu_read_lock_nesting))
		return BPF_CORE_READ(p, rcu_read_lock_nesting) > own;
	return false;
}

/* CONFIG_LRU_GEN's mark of a task inside handle_mm_fault (not in our vmlinux.h). */
struct task_struct___lru_gen {
	unsigned int in_lru_fault: 1;
} __attribute__((preserve_access_index));

/*
 * Whether @p is handling a page fault. It then holds its mm's mmap_lock or the
 * VMA's lock for reading, and a fork of any thread of that process, which
 * holds cgroup_threadgroup_rwsem (above), waits for it to write-lock them: a
 * thread parked in a fault held up cgroup moves through a sibling's fork.
 * Known where the kernel has CONFIG_LRU_GEN (set for a fault on most VMAs).
 */
static __always_inline bool bw_in_page_fault(struct task_struct *p)
{
	struct task_struct___lru_gen *t = (void *)p;

	if (!bpf_core_field_exists(t->in_lru_fault))
		return false;
	return BPF_CORE_READ_BITFIELD_PROBED(t, in_lru_fault);
}

/*
 * Whether the debt of group @slot leaves room for another run on credit: what
 * its CPUs owe, with that run, stays within @max. The refill pays debts first
 * (bw_pay_debts), so a task refused here waits about one period.
 */
static bool bw_debt_room(u32 slot, s64 max)
{
	s64 debt = 0;
	s32 cpu;

	bpf_for(cpu, 0, nr_cpu_ids) {
		struct bw_cpu *c = bpf_map_lookup_percpu_elem(&bw_cpus, &slot, cpu);
		s64 rt;

		if (!c)
			continue;
		rt = READ_ONCE(c->runtime);
		if (rt < 0)
			debt -= rt;
	}
	return debt + BW_RESCUE_SLICE_NS <= max;
}

/*
 * Whether @p, of a throttled group, runs on instead of parking (see above).
 * An RCU reader, and a task a refill released after this refused it
 * (kernel_pass), may take its groups' debt to BW_DEBT_HELD_MAX_NS, the
 * others to BW_DEBT_MAX_NS. Tasks that must run (exiting ones) take their
 * CPUs into debt too, unbounded: with one bound, a reader or a child inside
 * exit_signals (holding cgroup_threadgroup_rwsem for reading) parked behind
 * them, and as they took the room each refill made, stayed parked for up to
 * four periods while every cgroup move on the machine waited (move_latency).
 */
static bool bw_kernel_credit(struct task_struct *p, struct task_ctx *tctx)
{
	bool rcu;
	s64 max;
	s32 i;

	tctx->held_kernel = 0;
	if (!bw_kernel_credit_on || (p->flags & PF_KTHREAD))
		return false;
	rcu = bw_in_rcu_read_section(p);
	if (!(rcu || bw_in_fork_exec_exit(p, tctx) || bw_in_page_fault(p))) {
		tctx->kernel_pass = 0;
		return false;
	}
	max = rcu || tctx->kernel_pass ? BW_DEBT_HELD_MAX_NS : BW_DEBT_MAX_NS;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		if (i >= tctx->nr_chain)
			break;
		if (!bw_debt_room(chain_slot(tctx, i), max)) {
			tctx->held_kernel = 1;
			stat_inc(BW_STAT_KERNEL_DEBT);
			return false;
		}
	}
	stat_inc(BW_STAT_KERNEL_CREDIT);
	return true;
}

#endif /* __SCX_BW_KERNEL_CREDIT_BPF_H */
