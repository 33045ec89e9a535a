//! Events from BPF: what the kernel side tells the agent.
//!
//! BPF cannot call the agent; it queues a struct bw_event on the events ring,
//! which the run loop reads on its own thread: it sleeps in one ppoll on the
//! ring, a waker (signals, stats requests) and its next deadline. The
//! events: slack returned into a throttled pool (distributed after the slack
//! delay, unless the refill comes first), a cgroup's cpu.max (cgroup_watch.rs), a
//! limited cgroup's exit, and a pull from an idle group's pool (its period timer
//! restarts).

use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapHandle, RingBuffer, RingBufferBuilder};
use log::warn;

use super::Scheduler;
use crate::bpf_intf;
use crate::pools::{self, Due};

/// The events ring, consumed on the run loop's own thread: the loop sleeps in
/// [`LoopWaker::wait`], which returns when BPF submits to the ring (the ring's
/// epoll fd is in the waker's set), and then takes what the ring holds. An
/// event costs one wakeup of the agent, not a helper thread's wakeup and then
/// the loop's.
pub(super) struct EventRing {
    ring: RingBuffer<'static>,
    taken: Rc<RefCell<Vec<bpf_intf::bw_event>>>,
    /// The ring maps this handle's fd; dropped after the ring.
    _handle: MapHandle,
}

impl EventRing {
    pub(super) fn new(map: &libbpf_rs::Map) -> Result<Self> {
        let handle = MapHandle::try_from(map).context("events map")?;
        let taken = Rc::new(RefCell::new(Vec::new()));
        let sink = taken.clone();
        let mut builder = RingBufferBuilder::new();
        builder.add(&handle, move |data: &[u8]| {
            if data.len() >= std::mem::size_of::<bpf_intf::bw_event>() {
                // SAFETY: the record is a struct bw_event written by BPF; read
                // unaligned, it is plain old data.
                sink.borrow_mut().push(unsafe { std::ptr::read_unaligned(data.as_ptr() as *const bpf_intf::bw_event) });
            }
            0
        })?;
        let ring = builder.build().context("events ring")?;
        Ok(Self { ring, taken, _handle: handle })
    }

    /// The ring's epoll fd: readable when BPF submitted since the last take.
    pub(super) fn fd(&self) -> RawFd {
        self.ring.epoll_fd()
    }

    /// The events the ring holds now (no system call when it is empty).
    pub(super) fn take(&self) -> Vec<bpf_intf::bw_event> {
        let _ = self.ring.consume();
        std::mem::take(&mut *self.taken.borrow_mut())
    }
}

/// What wakes the run loop besides its deadlines and the events ring: an
/// eventfd that a signal handler thread (shutdown) and the stats server (a
/// request) write. Cloned freely; every clone writes the same eventfd.
#[derive(Clone)]
pub struct LoopWaker {
    fd: Arc<OwnedFd>,
}

impl LoopWaker {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: plain syscall; the fd is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a new, valid descriptor that nothing else owns.
        Ok(Self { fd: Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }) })
    }

    /// Wake the loop (from any thread).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd; a full counter
        // (EAGAIN) means a wake is pending anyway.
        unsafe { libc::write(self.fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }

    /// Sleep until `ring_fd` (if any) is readable, the waker was woken, or `timeout`
    /// passed; a wake is consumed.
    pub(super) fn wait(&self, ring_fd: Option<RawFd>, timeout: Duration) {
        let mut fds = [
            libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: ring_fd.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
        ];
        let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
        // SAFETY: fds is a valid array of 2 pollfds; ts a valid timespec; no sigmask.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        if n > 0 && fds[0].revents & libc::POLLIN != 0 {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a valid u64 from our non-blocking eventfd.
            unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
        }
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
