// `sqlx::migrate!` embeds the migrations when this crate compiles; without this, a migration
// added later is not seen until something else in the crate changes.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
