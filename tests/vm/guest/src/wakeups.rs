//! Workloads made of wakeups, for comparing scheduling cores (the benchmark scenarios):
//! `messaging` (many tasks passing messages, as hackbench does) and `wakelat` (how long a
//! woken thread waits to run, as schbench measures). Both take the common workload options
//! (workload.rs) and print one line at the end.

use crate::workload::{self, mono_ns, Common};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Senders and receivers per `messaging` group.
const PER_GROUP: usize = 4;
/// Bytes per message (hackbench's default).
const MESSAGE: usize = 100;

fn socketpair_dgram() -> Result<(i32, i32), String> {
    let mut fds = [0i32; 2];
    // SAFETY: valid out array of two fds.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, fds.as_mut_ptr()) } != 0 {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    Ok((fds[0], fds[1]))
}

fn close(fd: i32) {
    // SAFETY: an fd this workload owns, closed once.
    unsafe { libc::close(fd) };
}

/// hackbench-like messaging: `--threads G` groups, each of 4 senders and 4 receivers; every
/// receiver has a datagram socket that all 4 senders of its group write 100-byte messages
/// to, round robin, until the time is up. Senders block when a receiver's queue is full and
/// receivers when it is empty, so the count is bounded by how fast wakeups are served.
/// Prints `MESSAGING n=MESSAGES_RECEIVED`.
pub fn messaging(c: Common) -> Result<(), String> {
    workload::place(&c)?;
    let deadline = mono_ns() + c.seconds * 1_000_000_000;
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    let mut write_ends = Vec::new();
    for _ in 0..c.threads {
        let mut group = Vec::new();
        for _ in 0..PER_GROUP {
            let (r, w) = socketpair_dgram()?;
            group.push(w);
            write_ends.push(w);
            receivers.push(thread::spawn(move || -> u64 {
                let mut buf = [0u8; MESSAGE];
                let mut n = 0u64;
                // SAFETY: reads into a buffer of MESSAGE bytes on our own socket.
                while unsafe { libc::recv(r, buf.as_mut_ptr().cast(), MESSAGE, 0) } == MESSAGE as isize {
                    n += 1;
                }
                close(r);
                n
            }));
        }
        for _ in 0..PER_GROUP {
            let to = group.clone();
            senders.push(thread::spawn(move || -> Result<(), String> {
                let buf = [7u8; MESSAGE];
                while mono_ns() < deadline {
                    for &fd in &to {
                        // SAFETY: MESSAGE bytes from a valid buffer to a socket of ours.
                        if unsafe { libc::send(fd, buf.as_ptr().cast(), MESSAGE, 0) } != MESSAGE as isize {
                            return Err(format!("send: {}", std::io::Error::last_os_error()));
                        }
                    }
                }
                Ok(())
            }));
        }
    }
    for s in senders {
        s.join().map_err(|_| "sender panicked".to_string())??;
    }
    // An empty datagram ends each receiver (recv returns 0), after what is queued.
    for &w in &write_ends {
        // SAFETY: a zero-length datagram on our own socket.
        unsafe { libc::send(w, [].as_ptr(), 0, 0) };
    }
    let mut total = 0;
    for r in receivers {
        total += r.join().map_err(|_| "receiver panicked".to_string())?;
    }
    for w in write_ends {
        close(w);
    }
    println!("MESSAGING n={total}");
    Ok(())
}

/// Workers per `wakelat` waker.
const WORKERS_PER_WAKER: usize = 4;
/// How often a waker wakes each of its workers, and what each does when woken.
const WAKE_EVERY: Duration = Duration::from_millis(2);
const WORK_NS: u64 = 200_000;

/// schbench-like wakeup latency: `--threads W` workers (a multiple of 4), one waker thread
/// per 4. Every 2 ms a waker writes the time to the pipe of each of its workers that is
/// waiting (a worker still busy is skipped, as schbench's futex wake of an awake worker does
/// nothing, so no backlog builds up and each figure is one wakeup); a worker wakes, records
/// now minus that time (wake to run), burns 200 µs of CPU and waits again.
/// Prints `WAKELAT n=WAKEUPS p50_us=… p99_us=… max_us=…`.
pub fn wakelat(c: Common) -> Result<(), String> {
    workload::place(&c)?;
    let workers_n = (c.threads as usize).div_ceil(WORKERS_PER_WAKER) * WORKERS_PER_WAKER;
    let deadline = mono_ns() + c.seconds * 1_000_000_000;
    let mut workers = Vec::new();
    let mut wakers = Vec::new();
    for _ in 0..workers_n / WORKERS_PER_WAKER {
        let mut ends: Vec<(i32, Arc<AtomicBool>)> = Vec::new();
        for _ in 0..WORKERS_PER_WAKER {
            let (r, w) = workload::pipe()?;
            let waiting = Arc::new(AtomicBool::new(false));
            ends.push((w, waiting.clone()));
            workers.push(thread::spawn(move || -> Vec<u64> {
                let mut lat = Vec::new();
                let mut b = [0u8; 8];
                waiting.store(true, Ordering::SeqCst);
                // SAFETY: reads 8 bytes into a valid buffer from our own pipe.
                while unsafe { libc::read(r, b.as_mut_ptr().cast(), 8) } == 8 {
                    lat.push(mono_ns().saturating_sub(u64::from_ne_bytes(b)));
                    workload::burn(WORK_NS);
                    waiting.store(true, Ordering::SeqCst);
                }
                close(r);
                lat
            }));
        }
        wakers.push(thread::spawn(move || {
            let mut at = mono_ns();
            while at < deadline {
                for (w, waiting) in &ends {
                    if !waiting.swap(false, Ordering::SeqCst) {
                        continue;
                    }
                    let now = mono_ns().to_ne_bytes();
                    // SAFETY: 8 bytes from a valid buffer to our own pipe.
                    unsafe { libc::write(*w, now.as_ptr().cast(), 8) };
                }
                at += WAKE_EVERY.as_nanos() as u64;
                workload::sleep_until_mono(at);
            }
            for (w, _) in ends {
                close(w);
            }
        }));
    }
    for w in wakers {
        w.join().map_err(|_| "waker panicked".to_string())?;
    }
    let mut lat: Vec<u64> = Vec::new();
    for w in workers {
        lat.extend(w.join().map_err(|_| "worker panicked".to_string())?);
    }
    if lat.is_empty() {
        return Err("no wakeup recorded".into());
    }
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
    println!("WAKELAT n={} p50_us={:.0} p99_us={:.0} max_us={:.0}", lat.len(), q(0.5), q(0.99), q(1.0));
    Ok(())
}
