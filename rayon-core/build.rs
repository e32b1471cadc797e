// `links = "rayon-core"` requires a build script; like rayon-core's, it links nothing: the key
// only makes sure this is the one rayon-core of a build.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
