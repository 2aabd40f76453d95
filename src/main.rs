//! The `sufs` command: make, mount, check and inspect sufs images. The commands live in `cli`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
