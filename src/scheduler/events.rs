//! Events from BPF: what the kernel side tells the agent.
//!
//! BPF cannot call the agent; it queues a struct bw_event on the events ring,
//! which a helper thread reads and forwards to a channel, so that the run loop
//! waits in one select for events, stats requests and its next deadline. The
//! events: slack returned into a throttled pool (distributed after the slack
//! delay, unless the refill comes first), a cgroup's cpu.max (cgroup_watch.rs), a
//! limited cgroup's exit, and a pull from an idle group's pool (its period timer
//! restarts).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam::channel::Receiver;
use libbpf_rs::RingBufferBuilder;
use log::{error, warn};

use super::Scheduler;
use crate::bpf_intf;
use crate::pools::{self, Due};

/// Reader of the events ring, on its own thread: forwards events to the loop.
pub(super) struct EventReader {
    pub(super) events: Receiver<bpf_intf::bw_event>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for EventReader {
    /// The thread notices within one poll timeout (it holds its own map handle, so it
    /// may outlive the skeleton); not joined, so a shutdown does not wait for it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.thread.take());
    }
}

impl<'a> Scheduler<'a> {
    pub(super) fn on_event(&mut self, ev: bpf_intf::bw_event) -> Result<()> {
        let now = Instant::now();
        match ev.kind {
            bpf_intf::bw_event_kind_BW_EV_SLACK => self.on_slack(ev.slot as usize, now),
            bpf_intf::bw_event_kind_BW_EV_LIMIT => self.on_cgroupfs_limit(&ev, now)?,
            bpf_intf::bw_event_kind_BW_EV_EXIT => self.on_cgroup_exit(ev.cgid)?,
            bpf_intf::bw_event_kind_BW_EV_WAKE => self.wake(ev.slot as usize, now),
            k => warn!("unknown event kind {k} from BPF"),
        }
        Ok(())
    }

    /// A CPU returned slack into the throttled pool of `slot`: distribute it
    /// after the slack delay, unless the refill comes first anyway.
    fn on_slack(&mut self, slot: usize, now: Instant) {
        let Some(g) = self.groups.get_mut(slot) else { return };
        match g.timer.as_ref().and_then(|t| pools::slack_due(now, t.deadline())) {
            Some(at) => {
                if g.slack_at.is_none() {
                    g.slack_at = Some(at);
                    self.due.push(Due { at, slot, slack: true });
                }
            }
            None => self.clear_slack_pending(slot),
        }
    }

    /// Slack timer expiry: hand what is in the pool to the throttled group.
    pub(super) fn distribute_slack(&mut self, slot: usize) -> Result<()> {
        self.groups[slot].slack_at = None;
        self.clear_slack_pending(slot);
        let pool = self.pool(slot).load(Ordering::Acquire);
        if pools::worth_distributing(pool, bpf_intf::bw_consts_BW_MIN_LOCAL_NS as u64) {
            self.slack_distributions += 1;
            self.unthrottle(slot)?;
        }
        Ok(())
    }
}

/// Start the thread that reads the events ring and forwards each event.
pub(super) fn spawn_event_reader(map: &libbpf_rs::Map) -> Result<EventReader> {
    let handle = libbpf_rs::MapHandle::try_from(map).context("events map")?;
    let (tx, events) = crossbeam::channel::unbounded();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_thread = stop.clone();
    let thread = std::thread::Builder::new()
        .name("bpf_events".into())
        .spawn(move || {
            let mut builder = RingBufferBuilder::new();
            let added = builder
                .add(&handle, move |data: &[u8]| {
                    if data.len() >= std::mem::size_of::<bpf_intf::bw_event>() {
                        // SAFETY: the record is a struct bw_event written by BPF; read
                        // unaligned, it is plain old data.
                        let ev = unsafe { std::ptr::read_unaligned(data.as_ptr() as *const bpf_intf::bw_event) };
                        let _ = tx.send(ev);
                    }
                    0
                })
                .map(|_| ());
            let ring = match added.and_then(|()| builder.build()) {
                Ok(r) => r,
                Err(e) => {
                    error!("events ring: {e}; slack is distributed at refills only, cpu.max is not followed");
                    return;
                }
            };
            while !stop_thread.load(Ordering::Relaxed) {
                let _ = ring.poll(Duration::from_secs(1));
            }
        })
        .context("starting the events thread")?;
    Ok(EventReader { events, stop, thread: Some(thread) })
}
