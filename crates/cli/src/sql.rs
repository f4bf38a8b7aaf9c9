//! `tabos sql`: a read-only query through the node — over every realm for
//! an operator, over its own realm's rows for a realm admin.

use anyhow::Context;

use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    /// The query (one read-only statement)
    query: String,
    /// Most rows to print (the node caps it)
    #[arg(long, default_value_t = 1000)]
    max_rows: u32,
    /// See only this realm's rows and tenant tables, as its admin does
    /// [default: the credential's scope — every realm for an operator, its
    /// own realm for a realm admin]
    #[arg(long, default_value = "")]
    realm: String,
    #[command(flatten)]
    node: NodeAddr,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let result = client
            .sql_in(&args.realm, &args.query, vec![], args.max_rows)
            .await
            .context("query failed")?;
        crate::output::print_result(&result, crate::output::json());
        Ok(())
    })
}
