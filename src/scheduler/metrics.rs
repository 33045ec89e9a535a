//! Statistics: one snapshot of everything, for the report and the stats server.
//!
//! The snapshot (Metrics, stats.rs) is built on the agent's thread, from its own
//! books and from what BPF counts in bw_groups and its per-CPU maps. It is a copy
//! (about 0.4 ms natively for 1,026 groups), taken at the loop's priority: at
//! normal priority the loop waited behind the tasks it limits while every period
//! timer was due (up to 92 ms per `--stats` table under qemu TCG). What is slow
//! and not time-critical happens elsewhere: the `--stats` table is formatted and
//! printed by [`TablePrinter`]'s thread, the scx_stats server's thread turns a
//! snapshot into JSON (see [`Reply`]), and looking up cgroupfs groups' paths (a
//! walk of the hierarchy) is housekeeping at normal priority (period.rs). The
//! server asks the run loop for a snapshot per request over a channel, since only
//! the loop holds the Scheduler.

use std::sync::mpsc;

use crossbeam::channel::{Receiver, Sender};
use log::{error, info, warn};
use scx_stats::prelude::*;

use super::loader::{read_all_local_runtimes, read_counters};
use super::{cost, Group, LoopWaker, Origin, Scheduler, NSEC_PER_USEC};
use crate::advise::GroupHistory;
use crate::stats::{self, GroupMetrics, Metrics};

/// What a client of the stats socket asks the run loop for.
pub(super) enum Ask {
    /// The statistics (target "top", the default).
    Top,
    /// Target "history": the per-period history of the group whose cgroup is
    /// given (argument "cgroup"), or without one the list of groups.
    History(Option<String>),
}

/// What the run loop hands back for a request. A snapshot goes back as it is and
/// becomes JSON on the server's thread, where period timers do not wait for it: for
/// 1,026 groups the JSON takes 7 ms natively, the copy 0.4 ms (the scale scenario's
/// statistics work on the loop fell from about 40 to 18-28 ms per s under TCG).
pub(super) enum Reply {
    Top(Box<Metrics>),
    Json(serde_json::Value),
}

type Answer = Result<Reply, String>;

/// The stats server and the main loop's end of its request channel.
pub(super) struct StatsLink {
    _server: StatsServer<Ask, Answer>,
    pub(super) res: Sender<Answer>,
    pub(super) req: Receiver<Ask>,
}

impl<'a> Scheduler<'a> {
    /// The answer to a stats socket request (cgroupfs groups' paths looked up before).
    pub(super) fn answer(&mut self, ask: Ask) -> Answer {
        match ask {
            Ask::Top => Ok(Reply::Top(Box::new(self.metrics()))),
            Ask::History(None) => {
                let names: Vec<&str> = self.groups.iter().filter(|g| !g.free).map(|g| g.cfg.cgroup.as_str()).collect();
                Ok(Reply::Json(serde_json::json!({ "cgroups": names })))
            }
            Ask::History(Some(cg)) => {
                let want = cg.trim_matches('/');
                let slot = self
                    .groups
                    .iter()
                    .position(|g| !g.free && g.cfg.cgroup.trim_matches('/') == want)
                    .ok_or_else(|| format!("no limited group {cg:?}"))?;
                let wait_p99_us = stats::hist_percentile(&self.bss().bw_groups[slot].wait_hist, 0.99);
                let g = &self.groups[slot];
                let h = GroupHistory {
                    cgroup: g.cfg.cgroup.clone(),
                    source: source(g),
                    quota_us: g.cfg.quota_us,
                    period_us: g.cfg.period_us,
                    burst_us: if self.no_burst { 0 } else { g.cfg.burst_us },
                    nr_cpus: libbpf_rs::num_possible_cpus().unwrap_or(1) as u64,
                    wait_p99_us,
                    ..Default::default()
                }
                .from_records(g.book.history.records());
                serde_json::to_value(h).map(Reply::Json).map_err(|e| e.to_string())
            }
        }
    }

    /// A snapshot of every statistic (see stats.rs). Groups limited by their own
    /// cpu.max are named by id unless `resolve_paths` ran since they appeared.
    pub fn metrics(&mut self) -> Metrics {
        let mut m = Metrics { at_us: stats::monotonic_us(), ..Default::default() };
        stats::counters_into(&mut m, &read_counters(&self.skel.maps.bw_stats));
        m.refills = self.refills;
        m.active_groups = self.groups.iter().filter(|g| !g.free && g.timer.is_some()).count() as u64;
        m.idle_groups = self.groups.iter().filter(|g| !g.free && g.timer.is_some() && g.idle).count() as u64;
        m.slack_distributions = self.slack_distributions;
        m.llc_queues = self.nr_llcs as u64;
        m.numa_nodes = self.nr_nodes as u64;
        let us = |d: std::time::Duration| d.as_micros() as u64;
        let c = &self.cost;
        m.agent_cpu_usec = us(cost::thread_cpu());
        m.agent_process_cpu_usec = us(cost::process_cpu());
        m.agent_wakeups = c.wakeups;
        m.agent_timers_usec = us(c.timers);
        m.agent_unthrottle_runs = c.unthrottle_runs;
        m.agent_unthrottle_usec = us(c.unthrottle);
        m.agent_events = c.events;
        m.agent_events_usec = us(c.events_time);
        m.agent_poll_cpu_usec = us(c.poll_cpu);
        m.agent_stats_cpu_usec = us(c.stats_cpu);
        m.agent_reload_cpu_usec = us(c.reload_cpu);
        let mut late: Vec<u64> = self.lateness.iter().copied().collect();
        late.sort_unstable();
        m.timer_late_p99_us = late.get((late.len() * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or(0);

        let mut local = read_all_local_runtimes(&self.skel.maps.bw_cpus, self.groups.len());
        let bss = self.skel.maps.bss_data.as_ref().unwrap();
        for (slot, g) in self.groups.iter().enumerate() {
            if g.free {
                continue;
            }
            // SAFETY: a volatile copy of a plain-old-data struct BPF updates.
            let b = unsafe { std::ptr::read_volatile(&bss.bw_groups[slot]) };
            let us = |ns: u64| ns / NSEC_PER_USEC;
            m.groups.push(GroupMetrics {
                cgroup: g.cfg.cgroup.clone(),
                state: if g.timer.is_some() { "enforced" } else { "absent" }.into(),
                source: source(g),
                quota_us: g.cfg.quota_us,
                period_us: g.cfg.period_us,
                burst_us: if self.no_burst { 0 } else { g.cfg.burst_us },
                usage_usec: us(b.usage),
                nr_periods: g.nr_periods,
                nr_throttled: g.nr_throttled,
                throttled_usec: us(b.throttled_time),
                nr_bursts: g.book.nr_bursts,
                burst_usec: us(g.book.burst_ns),
                used_nr_bursts: g.book.used_nr_bursts,
                used_burst_usec: us(g.book.used_burst_ns),
                slack_returned_usec: us(b.slack_returned),
                nr_slack_returns: b.nr_slack_returns,
                pool_usec: b.runtime / NSEC_PER_USEC as i64,
                local_usec: std::mem::take(&mut local[slot]).into_iter().map(|ns| ns / NSEC_PER_USEC as i64).collect(),
                nr_parked: b.nr_parked,
                nr_safety_refills: b.nr_safety_refills,
                throttled_discard_usec: us(g.discarded_ns),
                wait_p50_us: stats::hist_percentile(&b.wait_hist, 0.50),
                wait_p99_us: stats::hist_percentile(&b.wait_hist, 0.99),
                wait_max_us: us(b.wait_max_ns),
                wait_sum_us: us(b.wait_sum_ns),
                wait_hist: b.wait_hist[..b.wait_hist.iter().rposition(|&n| n != 0).map_or(0, |i| i + 1)].to_vec(),
                history_usec: g.book.history.recent_used_us(crate::pools::HISTORY),
            });
        }
        m
    }
}

/// The `--stats` table, formatted and printed on a thread of its own at normal
/// priority, each snapshot against the one before.
pub(super) struct TablePrinter {
    tell: Option<mpsc::Sender<Metrics>>,
}

impl TablePrinter {
    /// Start the thread; `first` is the snapshot the first table counts from.
    pub(super) fn spawn(first: Metrics) -> anyhow::Result<Self> {
        let (tell, told) = mpsc::channel::<Metrics>();
        std::thread::Builder::new().name("scxbw-table".into()).spawn(move || {
            super::period::set_realtime(false);
            let mut prev = first;
            while let Ok(m) = told.recv() {
                if let Err(e) = m.format(&prev, &mut std::io::stdout()) {
                    error!("--stats: writing the statistics table: {e:#}; no more tables");
                    break;
                }
                prev = m;
            }
        })?;
        Ok(TablePrinter { tell: Some(tell) })
    }

    /// Hand the snapshot for the next table to the thread.
    pub(super) fn print(&mut self, m: Metrics) {
        if self.tell.as_ref().is_some_and(|t| t.send(m).is_err()) {
            self.tell = None;
        }
    }
}

/// Where a group's limit comes from, as the statistics say it.
fn source(g: &Group) -> String {
    match (g.origin, &g.rule) {
        (Origin::Config, _) => "config".into(),
        (Origin::Cgroupfs { .. }, Some(rule)) => rule.clone(),
        (Origin::Cgroupfs { .. }, None) => "cpu.max".into(),
    }
}

/// Serve [`Metrics`] on the scx_stats socket ([`stats::SOCKET`]), created
/// root-only, then opened to `group` if given. The server thread asks the main
/// loop for a snapshot per request. Without the socket the scheduler still runs
/// (and says so).
pub(super) fn launch_stats_server(group: Option<u32>, waker: LoopWaker) -> Option<StatsLink> {
    // SAFETY: umask is process-wide and this runs before any other thread
    // creates files; it makes the socket root-only from the start (0700: bind
    // gives a socket 0777 less the umask), and 0600 below.
    let old = unsafe { libc::umask(0o077) };
    let ask = move |what: Ask, (req, res): (&Sender<Ask>, &Receiver<Answer>)| -> anyhow::Result<serde_json::Value> {
        req.send(what)?;
        waker.wake();
        match res.recv()?.map_err(anyhow::Error::msg)? {
            Reply::Top(m) => m.to_json(),
            Reply::Json(v) => Ok(v),
        }
    };
    let ask2 = ask.clone();
    let data = stats::server_data::<Ask, Answer>()
        .add_stats("top", Box::new(move |_args, ch| ask(Ask::Top, ch)))
        .add_stats("history", Box::new(move |args, ch| ask2(Ask::History(args.get("cgroup").cloned()), ch)));
    let launched = StatsServer::new(data).launch();
    unsafe { libc::umask(old) };
    match launched {
        Ok(server) => {
            use std::os::unix::fs::PermissionsExt;
            // Execute permission means nothing on a socket; 0600 says what it is.
            if let Err(e) = std::fs::set_permissions(stats::SOCKET, std::fs::Permissions::from_mode(0o600)) {
                warn!("chmod 600 {}: {e}", stats::SOCKET);
            }
            if let Some(gid) = group {
                match stats::open_socket_to(std::path::Path::new(stats::SOCKET), gid) {
                    Ok(()) => info!("stats socket {} readable by group {gid}", stats::SOCKET),
                    Err(e) => error!("--stats-group {gid}: {e:#}; the stats socket stays root-only"),
                }
            }
            let (res, req) = server.channels();
            Some(StatsLink { _server: server, res, req })
        }
        Err(e) => {
            warn!("stats socket unavailable ({e:#}); --monitor will not work");
            None
        }
    }
}
