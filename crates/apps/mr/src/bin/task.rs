//! `tabos-mr-task`: the MapReduce procs as a program of their own
//! (`coordinator JOB N`, `map JOB I ATTEMPT`, `reduce JOB K ATTEMPT`), for
//! jobs submitted by something other than the `tabos` binary (which runs
//! them as `tabos mr-task …`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(tabos_mr::procs::main(&args));
}
