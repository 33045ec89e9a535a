// Compile the floor scheduler (src/bpf/floor.bpf.c) into a skeleton.
fn main() {
    scx_cargo::BpfBuilder::new()
        .unwrap()
        .enable_skel("src/bpf/floor.bpf.c", "floor")
        .build()
        .unwrap();
}
