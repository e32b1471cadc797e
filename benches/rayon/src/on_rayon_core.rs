//! The rayon programs of `programs.rs` on the real rayon-core (see benches/rayon.sh).
mod programs;

fn main() {
    programs::main(Vec::new);
}
