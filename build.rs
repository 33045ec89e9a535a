// Compile the BPF scheduler (src/bpf) into a skeleton and generate Rust bindings for the
// interface header it shares with the agent.
fn main() {
    scx_cargo::BpfBuilder::new()
        .unwrap()
        .enable_intf("src/bpf/intf.h", "bpf_intf.rs")
        .enable_skel("src/bpf/main.bpf.c", "bpf")
        .build()
        .unwrap();
}
