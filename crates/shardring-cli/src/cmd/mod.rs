//! One file per subcommand, each with its `Args` and a `run(args)`.

pub mod analyze;
pub mod fleet;
pub mod generate_docs;
pub mod lookup;
pub mod members;
pub mod migrate;
pub mod proxy;
pub mod ring;
pub mod simulate;
pub mod split;
