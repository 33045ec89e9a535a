//! scx_bandwidth: the Rust agent of a sched_ext scheduler that enforces cgroup
//! CPU bandwidth limits (cpu.max semantics).
//!
//! - `config`: the TOML configuration and its validation;
//! - `cgroups`: the cgroup2 mount and cgroup ids;
//! - `pools`: the period timer, the refill rule and the per-period history;
//! - `advise`: `scx_bandwidth advise`, the history replayed for other limits;
//! - `rules`: `[[rule]]` limits for cgroups found by glob;
//! - `scheduler`: loading the BPF side and the agent's run loop;
//! - `stats`: counters and the `--stats` report;
//! - `graph`: `--monitor --graph`, each group's periods and throttle waits drawn;
//! - `openmetrics`: the statistics as Prometheus text (`--metrics-addr`).

pub mod advise;
pub mod bpf_intf;
pub mod bpf_skel;
pub mod cgroups;
pub mod config;
pub mod graph;
pub mod openmetrics;
pub mod opts;
pub mod pools;
pub mod rules;
pub mod scheduler;
pub mod stats;
