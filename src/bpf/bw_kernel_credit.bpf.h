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
 *  - fork (copy_process) holds the read side of cgroup_threadgroup_rwsem,
 *    which a move takes for writing, and behind the waiting mover every new
 *    fork waits too; so does exit, briefly, before the task is PF_EXITING;
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
 * CPUs owe past BW_DEBT_MAX_NS it parks wherever it is, as before, so what a
 * group gets over any time is off by at most that. The next refill pays the
 * debts first (bw_pay_debts) and releases such tasks ahead of all others.
 */

/*
 * Whether @p is inside fork, exec or exit: the system call number its entry
 * into the kernel saved (-1 after an interrupt or exception). x86-64 only,
 * and not for 32-bit compat calls. @p must be a trusted pointer.
 */
static __always_inline bool bw_in_fork_exec_exit(struct task_struct *p)
{
#if defined(__TARGET_ARCH_x86)
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(p);
	long nr;

	if (!regs)
		return false;
	nr = regs->orig_ax;
	return nr == 56 /* clone */ || nr == 57 /* fork */ || nr == 58 /* vfork */ ||
	       nr == 59 /* execve */ || nr == 60 /* exit */ || nr == 231 /* exit_group */ ||
	       nr == 322 /* execveat */ || nr == 435 /* clone3 */;
#else
	return false;
#endif
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
 * its CPUs owe, with that run, stays within BW_DEBT_MAX_NS. The refill pays
 * debts first (bw_pay_debts), so a task refused here waits one period at most.
 */
static bool bw_debt_room(u32 slot)
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
	return debt + BW_RESCUE_SLICE_NS <= BW_DEBT_MAX_NS;
}

/* Whether @p, of a throttled group, runs on instead of parking (see above). */
static bool bw_kernel_credit(struct task_struct *p, struct task_ctx *tctx)
{
	s32 i;

	tctx->held_kernel = 0;
	if (!bw_kernel_credit_on || (p->flags & PF_KTHREAD) ||
	    !(bw_in_rcu_read_section(p) || bw_in_fork_exec_exit(p) || bw_in_page_fault(p)))
		return false;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		if (i >= tctx->nr_chain)
			break;
		if (!bw_debt_room(chain_slot(tctx, i))) {
			tctx->held_kernel = 1;
			stat_inc(BW_STAT_KERNEL_DEBT);
			return false;
		}
	}
	stat_inc(BW_STAT_KERNEL_CREDIT);
	return true;
}

#endif /* __SCX_BW_KERNEL_CREDIT_BPF_H */
