//! `terrain policy test PATH…`: runs the policies' own tests (`test_` rules), as
//! `opa test` does, in-process. Exit 1 when one fails or none is found.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::Exit;
use crate::output::{self, Style};
use crate::policy::Policies;

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Runs the `test_` rules of the policies under each PATH (directories or .rego
    /// files).
    Test(TestArgs),
}

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Directories (read recursively) or .rego files.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Never colour the output (also NO_COLOR).
    #[arg(long = "no-color")]
    no_color: bool,
}

pub fn run(command: PolicyCommand) -> anyhow::Result<Exit> {
    match command {
        PolicyCommand::Test(args) => test(&args),
    }
}

fn test(args: &TestArgs) -> anyhow::Result<Exit> {
    let mut policies = Policies::load(&args.paths)?;
    let results = policies.test();
    if results.is_empty() {
        anyhow::bail!(
            "no test_ rules in {}",
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    output::print(&output::policy::test_report(
        &results,
        Style::detect(args.no_color),
    ));
    if results.iter().any(|r| r.failure.is_some()) {
        return Err(super::Reported.into());
    }
    Ok(Exit::Ok)
}
