// Generated BPF skeleton (build.rs).
include!(concat!(env!("OUT_DIR"), "/floor_skel.rs"));
