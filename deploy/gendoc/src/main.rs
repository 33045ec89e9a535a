//! `scxbw-gendoc OUTDIR`: the man page (scx_bandwidth.8) and the bash, zsh and fish
//! completions of scx_bandwidth, generated from the same clap definition the binary
//! parses its arguments with, so they cannot drift from it. Cargo-deb packs them.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;
use scx_bandwidth::opts::Opts;

fn main() -> std::io::Result<()> {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: scxbw-gendoc OUTDIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&out)?;
    let cmd = Opts::command().name("scx_bandwidth");
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).section("8").render(&mut page)?;
    std::fs::write(out.join("scx_bandwidth.8"), page)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "scx_bandwidth", &out)?;
    }
    for e in std::fs::read_dir(&out)? {
        println!("{}", e?.path().display());
    }
    Ok(())
}
