//! The machine's cache and NUMA topology, for BPF's per-LLC queues
//! (src/bpf/queues.bpf.h): which LLC each CPU belongs to, which node each LLC
//! is on, and for each LLC the others nearest first, the order in which its
//! idle CPUs steal. Read with scx_utils' `Topology` (online CPUs only) before
//! attaching, and again, on a thread of its own, after CPUs go offline or come
//! online (BPF bumps bw_hotplug_seq).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use log::{info, warn};
use scx_utils::Topology;

use super::Scheduler;
use crate::bpf_intf;

const MAX_LLCS: usize = bpf_intf::bw_consts_BW_MAX_LLCS as usize;
const MAX_CPUS: usize = bpf_intf::bw_consts_BW_MAX_CPUS as usize;

/// What BPF is told, independent of where it was read from (unit-testable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// (cpu, llc) for every CPU known.
    pub cpu_llc: Vec<(usize, usize)>,
    /// Node of each LLC, indexed by LLC.
    pub llc_node: Vec<usize>,
    /// Other LLCs of each LLC, nearest first.
    pub order: Vec<Vec<usize>>,
}

impl Layout {
    /// `cpus`: (cpu, llc, node) as read, with the reader's LLC ids; `distance(a, b)`:
    /// NUMA distance of nodes a and b. `known`: (cpu, llc) for every CPU an earlier
    /// layout placed, with the ids BPF was given. The reader numbers LLCs afresh on
    /// every read (after hotplug the same LLC may get another id), so ids are ours:
    /// an LLC takes the id most of its CPUs had before (even if another LLC read
    /// has it too), else the lowest id no LLC ever had, CPUs in id order. Ids at or above BW_MAX_LLCS fold into the last.
    /// `at_least`: LLC queues BPF already has. Their number never shrinks: tasks may
    /// still wait in the queue of an LLC whose CPUs all went offline, and CPUs only
    /// look at queues below the count. Such a queue comes last in every order.
    pub fn new(
        cpus: &[(usize, usize, usize)],
        distance: impl Fn(usize, usize) -> usize,
        known: &[(usize, usize)],
        at_least: usize,
    ) -> Self {
        let ids = stable_llc_ids(cpus, known);
        let fold = |llc: usize| llc.min(MAX_LLCS - 1);
        let cpu_llc: Vec<(usize, usize)> =
            cpus.iter().map(|&(c, raw, _)| (c, fold(ids[&raw]))).collect();
        let nr = cpu_llc
            .iter()
            .map(|&(_, llc)| llc + 1)
            .max()
            .unwrap_or(1)
            .max(at_least.min(MAX_LLCS));
        let mut llc_node = vec![0; nr];
        let mut has_cpus = vec![false; nr];
        for (&(_, llc), &(_, _, node)) in cpu_llc.iter().zip(cpus) {
            llc_node[llc] = node;
            has_cpus[llc] = true;
        }
        let order = (0..nr)
            .map(|l| {
                let mut others: Vec<usize> = (0..nr).filter(|&o| o != l).collect();
                // Same node first (distance to itself is the smallest), then by distance, then id.
                others.sort_by_key(|&o| {
                    (
                        !has_cpus[o],
                        llc_node[o] != llc_node[l],
                        distance(llc_node[l], llc_node[o]),
                        o,
                    )
                });
                others
            })
            .collect();
        Layout { cpu_llc, llc_node, order }
    }

    pub fn from_raw(raw: &Raw, known: &[(usize, usize)], at_least: usize) -> Self {
        let distance = |a: usize, b: usize| {
            raw.distance.get(&(a, b)).copied().unwrap_or(if a == b { 10 } else { 20 })
        };
        Self::new(&raw.cpus, distance, known, at_least)
    }

    pub fn nr_llcs(&self) -> usize {
        self.llc_node.len()
    }

    pub fn nr_nodes(&self) -> usize {
        let mut nodes = self.llc_node.clone();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }
}

/// The reader's LLC id -> ours, for `Layout::new`.
fn stable_llc_ids(
    cpus: &[(usize, usize, usize)],
    known: &[(usize, usize)],
) -> BTreeMap<usize, usize> {
    let before: BTreeMap<usize, usize> = known.iter().copied().collect();
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(cpu, raw, _) in cpus {
        groups.entry(raw).or_default().push(cpu);
    }
    let mut groups: Vec<(usize, Vec<usize>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, cs)| cs.iter().min().copied());
    let mut ids = BTreeMap::new();
    let mut taken = BTreeSet::new();
    for (raw, cs) in &groups {
        let mut votes: BTreeMap<usize, usize> = BTreeMap::new();
        for c in cs {
            if let Some(&l) = before.get(c) {
                *votes.entry(l).or_default() += 1;
            }
        }
        // Most votes, then the lowest id. Taken or not: while a CPU comes online sysfs
        // may show it in an LLC of its own for a moment; it stays in its LLC's queue.
        let best = votes.into_iter().max_by_key(|&(l, n)| (n, std::cmp::Reverse(l)));
        if let Some((l, _)) = best {
            ids.insert(*raw, l);
            taken.insert(l);
        }
    }
    let ever: BTreeSet<usize> = before.values().copied().collect();
    for (raw, _) in &groups {
        if !ids.contains_key(raw) {
            let l = (0..).find(|l| !taken.contains(l) && !ever.contains(l)).unwrap();
            ids.insert(*raw, l);
            taken.insert(l);
        }
    }
    ids
}

/// The topology as read: (cpu, llc, node) with the reader's LLC ids, and NUMA distances.
pub struct Raw {
    cpus: Vec<(usize, usize, usize)>,
    distance: BTreeMap<(usize, usize), usize>,
}

impl Raw {
    /// Read with scx_utils (online CPUs only). Slow: about 200 ms of CPU at 8 vCPUs
    /// under qemu TCG, so after hotplug it is done by `TopologyReader`, never on the
    /// refill thread.
    pub fn read() -> Result<Self> {
        let topo = Topology::new()?;
        let cpus = topo.all_cpus.values().map(|c| (c.id, c.llc_id, c.node_id)).collect();
        let mut distance = BTreeMap::new();
        for (&a, n) in &topo.nodes {
            for (b, &d) in n.distance.iter().enumerate() {
                distance.insert((a, b), d);
            }
        }
        Ok(Raw { cpus, distance })
    }
}

/// After a hotplug event, wait this long before reading (a burst of events is read once,
/// and sysfs may describe a CPU just brought up only a moment after BPF hears of it).
const SETTLE: Duration = Duration::from_millis(250);
/// At most one read per this interval: a CPU toggled every 500 ms must not keep a
/// CPU busy reading sysfs. Meanwhile BPF keeps the previous layout, which stays
/// correct: an offline CPU takes no task, a returning one goes back to its LLC.
const MIN_GAP: Duration = Duration::from_secs(2);

/// A thread at normal priority that reads the topology when asked; the agent's loop
/// picks the result up at its next poll.
pub struct TopologyReader {
    ask: mpsc::Sender<()>,
    done: mpsc::Receiver<Result<Raw>>,
}

impl TopologyReader {
    /// Start the thread (before the agent turns SCHED_FIFO: it inherits the policy).
    pub fn spawn() -> Result<Self> {
        let (ask, asked) = mpsc::channel::<()>();
        let (tell, done) = mpsc::channel();
        std::thread::Builder::new().name("scxbw-topology".into()).spawn(move || {
            let mut last: Option<Instant> = None;
            while asked.recv().is_ok() {
                let at = last.map_or(Instant::now() + SETTLE, |l| (Instant::now() + SETTLE).max(l + MIN_GAP));
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                while asked.try_recv().is_ok() {}
                last = Some(Instant::now());
                if tell.send(Raw::read()).is_err() {
                    break;
                }
            }
        })?;
        Ok(TopologyReader { ask, done })
    }
}

impl<'a> Scheduler<'a> {
    /// Write `layout` to BPF. Per-CPU entries first, the LLC count last: a
    /// CPU that reads the count sees orders and nodes for every LLC below it.
    pub(super) fn write_topology(&mut self, layout: &Layout) {
        let bss = self.bss();
        for (l, node) in layout.llc_node.iter().enumerate() {
            bss.bw_llc_node[l] = *node as u32;
            for (i, o) in layout.order[l].iter().enumerate() {
                bss.bw_llc_order[l][i] = *o as u8;
            }
        }
        for &(cpu, llc) in &layout.cpu_llc {
            if cpu < MAX_CPUS {
                bss.bw_cpu_llc[cpu] = llc as u32;
            }
        }
        bss.bw_nr_llcs = layout.nr_llcs() as u32;
        self.nr_llcs = layout.nr_llcs();
        for &(cpu, llc) in &layout.cpu_llc {
            match self.known_llc.iter_mut().find(|(c, _)| *c == cpu) {
                Some(e) => e.1 = llc,
                None => self.known_llc.push((cpu, llc)),
            }
        }
        self.nr_nodes = layout.nr_nodes();
    }

    /// Write a topology read to BPF; on failure keep what BPF has (all CPUs in one
    /// LLC at worst: scheduling stays correct, only less local).
    pub(super) fn apply_topology(&mut self, raw: Result<Raw>, why: &str) {
        match raw {
            Ok(raw) => {
                let layout = Layout::from_raw(&raw, &self.known_llc, self.nr_llcs);
                self.write_topology(&layout);
                info!(
                    "topology ({why}): {} CPUs, {} LLC queue(s), {} NUMA node(s)",
                    layout.cpu_llc.len(),
                    layout.nr_llcs(),
                    layout.nr_nodes()
                );
            }
            Err(e) => warn!("reading the CPU topology ({why}): {e:#}; keeping the previous one"),
        }
    }

    /// After CPUs went offline or came online (bw_hotplug_seq moved): have the
    /// topology read again, and once more after that read (sysfs may describe a
    /// CPU just brought up only a moment after the scheduler hears of it).
    pub(super) fn poll_topology(&mut self) {
        if self.topology_reader.is_none() {
            return;
        }
        let bss = self.bss();
        // SAFETY: naturally aligned u64 in the mmapped .bss; BPF adds to it atomically.
        let seq =
            unsafe { AtomicU64::from_ptr(&raw mut bss.bw_hotplug_seq) }.load(Ordering::Acquire);
        let Some(reader) = &self.topology_reader else { return };
        if seq != self.hotplug_seen {
            self.hotplug_seen = seq;
            self.topology_again = true;
            let _ = reader.ask.send(());
        }
        if let Ok(raw) = reader.done.try_recv() {
            if std::mem::take(&mut self.topology_again) {
                let _ = reader.ask.send(());
            }
            self.apply_topology(raw, "after hotplug");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numa(a: usize, b: usize) -> usize {
        if a == b {
            10
        } else {
            10 + 10 * a.abs_diff(b)
        }
    }

    #[test]
    fn two_nodes_two_llcs_each_steal_in_node_first() {
        // 8 CPUs, LLCs of 2 CPUs, LLC 0-1 on node 0, 2-3 on node 1.
        let cpus: Vec<_> = (0..8).map(|c| (c, c / 2, c / 4)).collect();
        let l = Layout::new(&cpus, numa, &[], 1);
        assert_eq!(l.nr_llcs(), 4);
        assert_eq!(l.nr_nodes(), 2);
        assert_eq!(l.llc_node, vec![0, 0, 1, 1]);
        assert_eq!(l.order[0], vec![1, 2, 3]);
        assert_eq!(l.order[1], vec![0, 2, 3]);
        assert_eq!(l.order[2], vec![3, 0, 1]);
        assert_eq!(l.order[3], vec![2, 0, 1]);
        assert_eq!(l.cpu_llc[5], (5, 2));
    }

    #[test]
    fn nearer_node_before_farther() {
        // Three nodes in a line, one LLC each: node 1 is 20 from both others.
        let cpus = [(0, 0, 0), (1, 1, 1), (2, 2, 2)];
        let l = Layout::new(&cpus, numa, &[], 1);
        assert_eq!(l.order[0], vec![1, 2]);
        assert_eq!(l.order[2], vec![1, 0]);
        assert_eq!(l.order[1], vec![0, 2]);
    }

    #[test]
    fn one_llc_has_no_other() {
        let l = Layout::new(&[(0, 0, 0), (1, 0, 0)], numa, &[], 1);
        assert_eq!(l.nr_llcs(), 1);
        assert!(l.order[0].is_empty());
    }

    #[test]
    fn the_count_never_shrinks_and_emptied_llcs_come_last() {
        // LLC 1's CPUs went offline: its queue stays, looked at after the others.
        let cpus = [(0, 0, 0), (1, 0, 0), (4, 2, 0), (5, 2, 0)];
        let l = Layout::new(&cpus, numa, &[(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2), (6, 3)], 4);
        assert_eq!(l.nr_llcs(), 4);
        assert_eq!(l.order[0], vec![2, 1, 3]);
        assert_eq!(l.order[2], vec![0, 1, 3]);
    }

    #[test]
    fn ids_survive_the_reader_renumbering_after_hotplug() {
        // Two LLCs of 4 CPUs. At start the reader calls them 0 and 1; after CPU 1 and
        // then all of LLC 1 went offline and came back, it calls them 2 and 0.
        let start: Vec<_> = (0..8).map(|c| (c, c / 4, c / 4)).collect();
        let a = Layout::new(&start, numa, &[], 1);
        let mut known = a.cpu_llc.clone();
        let without: Vec<_> = [0, 2, 3].iter().map(|&c| (c, 5, 0)).collect();
        let b = Layout::new(&without, numa, &known, a.nr_llcs());
        assert_eq!(b.cpu_llc, vec![(0, 0), (2, 0), (3, 0)]);
        assert_eq!(b.nr_llcs(), 2);
        known.extend(b.cpu_llc.iter().copied());
        let back: Vec<_> = (0..8).map(|c| (c, if c < 4 { 2 } else { 0 }, c / 4)).collect();
        let c = Layout::new(&back, numa, &known, b.nr_llcs());
        assert_eq!(c, a);
    }

    #[test]
    fn a_new_llc_takes_an_id_no_llc_had() {
        // LLC 0 (CPUs 0-1) and LLC 1 (CPUs 2-3) known; CPU 2-3 offline, CPUs 4-5 of an
        // LLC never seen come online: they must not take LLC 1's id, whose CPUs may return.
        let known = [(0, 0), (1, 0), (2, 1), (3, 1)];
        let cpus = [(0, 7, 0), (1, 7, 0), (4, 3, 0), (5, 3, 0)];
        let l = Layout::new(&cpus, numa, &known, 2);
        assert_eq!(l.cpu_llc, vec![(0, 0), (1, 0), (4, 2), (5, 2)]);
        assert_eq!(l.nr_llcs(), 3);
    }

    #[test]
    fn a_cpu_shown_alone_for_a_moment_stays_in_its_llc() {
        // CPU 4 just came online and sysfs does not yet list it with 5-7.
        let known: Vec<_> = (0..8).map(|c| (c, c / 4)).collect();
        let cpus: Vec<_> = (0..8).map(|c| (c, if c == 4 { 9 } else { c / 4 }, c / 4)).collect();
        let l = Layout::new(&cpus, numa, &known, 2);
        assert_eq!(l.nr_llcs(), 2);
        assert_eq!(l.cpu_llc, known);
    }

    #[test]
    fn sparse_reader_ids_become_dense() {
        let cpus = [(0, 4, 0), (1, 4, 0), (2, 9, 0), (3, 9, 0)];
        let l = Layout::new(&cpus, numa, &[], 1);
        assert_eq!(l.nr_llcs(), 2);
        assert_eq!(l.cpu_llc, vec![(0, 0), (1, 0), (2, 1), (3, 1)]);
    }

    #[test]
    fn llcs_beyond_the_maximum_fold_into_the_last() {
        let cpus: Vec<_> = (0..MAX_LLCS + 10).map(|c| (c, c, 0)).collect();
        let l = Layout::new(&cpus, numa, &[], 1);
        assert_eq!(l.nr_llcs(), MAX_LLCS);
        assert_eq!(l.cpu_llc.last(), Some(&(MAX_LLCS + 9, MAX_LLCS - 1)));
        assert!(l.order.iter().all(|o| o.len() == MAX_LLCS - 1));
    }
}
