//! scxbw-floor: attaches the floor scheduler (src/bpf/floor.bpf.c) until SIGINT or SIGTERM,
//! then detaches and reports why sched_ext ended. The benchmarks run it in the VM beside
//! scx_bandwidth and the kernel's own scheduler; it is not a scheduler to run a machine with.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report};

mod bpf_skel;
use bpf_skel::*;

fn main() -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed)).context("signal handler")?;

    let mut open_object = MaybeUninit::uninit();
    let builder = FloorSkelBuilder::default();
    let open_opts: Option<libbpf_rs::libbpf_sys::bpf_object_open_opts> = None;
    let mut skel = scx_ops_open!(builder, &mut open_object, floor_ops, open_opts)?;
    let mut skel = scx_ops_load!(skel, floor_ops, uei)?;
    let link = scx_ops_attach!(skel, floor_ops)?;
    eprintln!("scxbw-floor: attached");
    while !stop.load(Ordering::Relaxed) && !uei_exited!(&skel, uei) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let ejected = !stop.load(Ordering::Relaxed);
    drop(link);
    uei_report!(&skel, uei)?;
    if ejected {
        bail!("sched_ext ended the floor scheduler before it was asked to stop");
    }
    Ok(())
}
