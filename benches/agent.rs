//! Micro-benchmarks of the agent's own work, run by `cargo bench`:
//!
//! - `period/10000_groups`: one period (100 ms) of 10,000 groups' period timers, as the
//!   agent's loop runs them: pop each due deadline, expire the timer, refill the pool
//!   (the atomic the BPF side takes from), book the period's burst figures and history,
//!   queue the next deadline. The distribution to throttled CPUs is a BPF program run
//!   (bw_unthrottle) and needs a sched_ext kernel; it is not part of this figure.
//! - `config/parse_4096_groups`: parsing and validating a configuration with the most
//!   groups the scheduler accepts.

use std::hint::black_box;
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use scx_bandwidth::config;
use scx_bandwidth::pools::{self, Due, PeriodBook, PeriodTimer, TimerQueue};

const GROUPS: usize = 10_000;
const PERIOD: Duration = Duration::from_millis(100);
const QUOTA_NS: u64 = 20_000_000;
const BURST_NS: u64 = 10_000_000;

struct Agent {
    timers: Vec<PeriodTimer>,
    pools: Vec<AtomicI64>,
    books: Vec<PeriodBook>,
    usage: Vec<u64>,
    due: TimerQueue,
    now: Instant,
}

impl Agent {
    /// Every group with its own phase across the period, as activations spread them.
    fn new(n: usize) -> Agent {
        let t0 = Instant::now();
        let mut a = Agent {
            timers: Vec::with_capacity(n),
            pools: (0..n).map(|_| AtomicI64::new(pools::refill(0, QUOTA_NS, BURST_NS))).collect(),
            // Each with the history the agent keeps by default (--history-secs).
            books: vec![PeriodBook { history: pools::History::new((pools::DEFAULT_HISTORY_SECS * 10) as usize), ..Default::default() }; n],
            usage: vec![0; n],
            due: TimerQueue::default(),
            now: t0,
        };
        for slot in 0..n {
            let start = t0 - PERIOD * slot as u32 / n as u32;
            let t = PeriodTimer::new(PERIOD, start);
            a.books[slot].start(0, start);
            a.due.push(Due { at: t.deadline(), slot, slack: false });
            a.timers.push(t);
        }
        a
    }

    /// Advance by one period and run every timer that came due; returns the refills.
    fn run_period(&mut self) -> usize {
        self.now += PERIOD;
        let mut refills = 0;
        while let Some(d) = self.due.pop_due(self.now) {
            let slot = d.slot;
            let Some(overrun) = self.timers[slot].expire(self.now) else { continue };
            // What the group's CPUs took and used this period (varies by group).
            let used = QUOTA_NS / 2 + (slot as u64 % 7) * QUOTA_NS / 10;
            self.pools[slot].fetch_sub(used as i64, std::sync::atomic::Ordering::AcqRel);
            self.usage[slot] += used;
            let (left, refilled) = pools::refill_shared(&self.pools[slot], QUOTA_NS, BURST_NS);
            self.books[slot].close(QUOTA_NS, PERIOD, (left, refilled), (self.usage[slot], 0), overrun, false, self.now);
            self.due.push(Due { at: self.timers[slot].deadline(), slot, slack: false });
            refills += 1;
        }
        refills
    }
}

fn period_processing(c: &mut Criterion) {
    let mut g = c.benchmark_group("period");
    g.throughput(Throughput::Elements(GROUPS as u64));
    let mut agent = Agent::new(GROUPS);
    // Every group refills exactly once per period: checked, so the figure means that.
    assert_eq!(agent.run_period(), GROUPS);
    g.bench_function("10000_groups", |b| b.iter(|| black_box(agent.run_period())));
    g.finish();
}

fn config_loading(c: &mut Criterion) {
    let n = config::MAX_GROUPS;
    let text: String = (0..n)
        .map(|i| {
            format!(
                "[[group]]\ncgroup = \"bench/g{i:05}\"\nquota_us = {}\nperiod_us = 100000\nburst_us = 10000\n\n",
                20_000 + i % 1000
            )
        })
        .collect();
    assert_eq!(config::parse(&text, "bench").map(|c| c.groups.len()).ok(), Some(n));
    let mut g = c.benchmark_group("config");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(format!("parse_{n}_groups"), |b| b.iter(|| config::parse(black_box(&text), "bench").is_ok()));
    g.finish();
}

criterion_group!(benches, period_processing, config_loading);
criterion_main!(benches);
