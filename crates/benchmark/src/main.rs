//! The Quench benchmark: runs suites of workloads and prints claimed against measured speed-ups,
//! with the quality metric checked beside the speed (the command line is [`benchmark::cli`]).

quench_support::aligned_allocator!();

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(benchmark::cli::main(std::env::args_os()))
}
