//! Test material shared by the crates' end-to-end tests.

use std::path::Path;

/// A small corpus on the language topics the question touches, in the three formats.
pub fn write_sample_corpus(dir: &Path) {
    let topics = [
        (
            "ownership",
            "Ownership is a set of rules that govern how a program manages memory. Each value has exactly one owner at a time. When the owner goes out of scope, the value is dropped and its memory is returned. Moving a value transfers ownership to the new variable, and the old variable can no longer be used.",
        ),
        (
            "borrowing",
            "A reference lets code use a value without taking ownership of it. Borrowing rules allow many immutable references or exactly one mutable reference at a time. The borrow checker enforces these rules at compile time, so data races cannot compile. A reference must never outlive the value it points to.",
        ),
        (
            "lifetimes",
            "Lifetimes describe how long references stay valid. The compiler infers most lifetimes with elision rules. Explicit lifetime annotations relate the lifetimes of several references to each other. A dangling reference is rejected because its lifetime is shorter than the reference that uses it.",
        ),
        (
            "smart-pointers",
            "Smart pointers own the data they point to and add behaviour on top of references. Box stores a value on the heap with a single owner. Reference counting with Rc enables multiple ownership of one value in single-threaded code. When the last owner is dropped, the value is cleaned up.",
        ),
        (
            "threads",
            "Threads let a program run code in parallel. A closure moved into a thread takes ownership of the values it captures. Channels transfer ownership of messages from one thread to another. Mutex and Arc share state safely because ownership rules still apply across threads.",
        ),
        (
            "drop",
            "The Drop trait runs code when a value goes out of scope. Rust calls drop automatically, so resources are released exactly once. Double free errors cannot happen because only the owner frees memory. A value can be dropped early by passing it to the drop function.",
        ),
        (
            "strings",
            "A String owns a heap buffer that holds its text. Assigning a String to another variable moves ownership instead of copying the buffer. Cloning makes a deep copy when two owners are really needed. String slices borrow part of a String without owning it.",
        ),
        (
            "copy",
            "Types that implement Copy are duplicated instead of moved. Integers, booleans and characters are Copy because they live entirely on the stack. A type that owns heap memory cannot be Copy. Copy types keep their original variable usable after assignment.",
        ),
    ];
    for (i, (name, text)) in topics.iter().enumerate() {
        let paras: Vec<String> = (0..3)
            .map(|k| format!("{text} This is note {k} on {name} ownership in Rust programs."))
            .collect();
        match i % 3 {
            0 => std::fs::write(
                dir.join(format!("{name}.md")),
                format!("# The {name} chapter\n\n{}\n", paras.join("\n\n")),
            ),
            1 => std::fs::write(
                dir.join(format!("{name}.html")),
                format!(
                    "<html><head><title>The {name} chapter</title></head><body><nav>Home Next</nav><main><h1>The {name} chapter</h1>{}</main></body></html>",
                    paras.iter().map(|p| format!("<p>{p}</p>")).collect::<String>()
                ),
            ),
            _ => std::fs::write(
                dir.join(format!("{name}.txt")),
                format!("The {name} chapter\n\n{}\n", paras.join("\n\n")),
            ),
        }
        .expect("write corpus file");
    }
}
