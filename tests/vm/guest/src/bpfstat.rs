//! Run time and run count of every loaded BPF program (kernel.bpf_stats_enabled), read
//! with the bpf(2) syscall: what each of the scheduler's ops costs per call.

use std::collections::BTreeMap;

const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// struct bpf_prog_info up to run_cnt (uapi linux/bpf.h): name at 64, run_time_ns at 192,
/// run_cnt at 200.
const INFO_LEN: usize = 208;

fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> libc::c_long {
    // SAFETY: attr is a zeroed union bpf_attr large enough for these commands.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) }
}

/// Switches the kernel's per-program statistics on or off.
pub fn enable(on: bool) -> Result<(), String> {
    std::fs::write(
        "/proc/sys/kernel/bpf_stats_enabled",
        if on { "1" } else { "0" },
    )
    .map_err(|e| format!("kernel.bpf_stats_enabled: {e}"))
}

/// Program name -> (run_time_ns, run_cnt), summed over programs of one name.
pub fn snapshot() -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    let mut id = 0u32;
    loop {
        let mut a = [0u8; 128];
        a[0..4].copy_from_slice(&id.to_ne_bytes());
        if bpf(BPF_PROG_GET_NEXT_ID, &mut a) != 0 {
            break;
        }
        id = u32::from_ne_bytes(a[4..8].try_into().unwrap());
        let mut a = [0u8; 128];
        a[0..4].copy_from_slice(&id.to_ne_bytes());
        let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut a);
        if fd < 0 {
            continue;
        }
        let mut info = [0u8; INFO_LEN];
        let mut a = [0u8; 128];
        a[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
        a[4..8].copy_from_slice(&(INFO_LEN as u32).to_ne_bytes());
        a[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
        let ok = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a) == 0;
        // SAFETY: our own fd.
        unsafe { libc::close(fd as i32) };
        if !ok {
            continue;
        }
        let name: String = info[64..80]
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as char)
            .collect();
        let ns = u64::from_ne_bytes(info[192..200].try_into().unwrap());
        let cnt = u64::from_ne_bytes(info[200..208].try_into().unwrap());
        let e = out.entry(name).or_insert((0, 0));
        e.0 += ns;
        e.1 += cnt;
    }
    out
}
