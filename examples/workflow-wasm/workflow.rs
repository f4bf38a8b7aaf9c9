//! Durable workflows in one WASI module (issue 41): run with
//!
//!   tabos workflow run workflow.wasm --function order --input "widget 3"
//!
//! `order` reserves stock with a stored procedure (exactly once), makes an
//! invoice (a recorded step), waits for the warehouse (a durable sleep)
//! and returns the invoice. `tally` calls procedure `counter` once per
//! step and, halfway, waits at a gate (a name in the namespace): kill its
//! node while it waits and it goes on elsewhere, every step run once.
//! `steps` takes N recorded steps in a row (a benchmark's).

mod tabos_workflow;

use tabos_workflow::{Ctx, Error};

/// "ITEM QTY": reserves QTY of ITEM, invoices it at 10 per unit.
fn order(ctx: &mut Ctx, input: Vec<u8>) -> Result<Vec<u8>, Error> {
    let text = String::from_utf8(input).map_err(|_| Error::Failed("input is not text".into()))?;
    let (item, qty) = text
        .split_once(' ')
        .ok_or_else(|| Error::Failed(format!("input {text:?}: expected ITEM QTY")))?;
    let qty: u64 = qty
        .trim()
        .parse()
        .map_err(|_| Error::Failed(format!("quantity {qty:?} is not a number")))?;
    let left = ctx.procedure("reserve", text.as_bytes())?;
    let invoice = ctx.step("invoice", || {
        Ok(format!("{qty} x {item} = {}", qty * 10).into_bytes())
    })?;
    ctx.sleep(500)?;
    let mut out = invoice;
    out.extend_from_slice(b"; left in stock: ");
    out.extend_from_slice(&left);
    Ok(out)
}

/// "N GATE": N steps of procedure `counter` (args step-1 … step-N); after
/// half of them, waits until name GATE exists.
fn tally(ctx: &mut Ctx, input: Vec<u8>) -> Result<Vec<u8>, Error> {
    let text = String::from_utf8(input).map_err(|_| Error::Failed("input is not text".into()))?;
    let (n, gate) = text
        .split_once(' ')
        .ok_or_else(|| Error::Failed(format!("input {text:?}: expected N GATE")))?;
    let n: u32 = n
        .parse()
        .map_err(|_| Error::Failed(format!("{n:?} is not a number")))?;
    for i in 1..=n {
        if i == n / 2 + 1 {
            ctx.step("gate", || Ok(Vec::new()))?;
            // Inside no step: a proc run again waits at the gate again,
            // unless the step after it was recorded.
            ctx.wait_for_name(gate)?;
        }
        ctx.procedure("counter", format!("step-{i}").as_bytes())?;
    }
    Ok(format!("tallied {n}").into_bytes())
}

/// "N": N recorded steps in sequence, each giving its number (what
/// `tabos-bench workflows` times).
fn steps(ctx: &mut Ctx, input: Vec<u8>) -> Result<Vec<u8>, Error> {
    let n: u32 = String::from_utf8_lossy(&input)
        .trim()
        .parse()
        .map_err(|_| Error::Failed("input: expected a number of steps".into()))?;
    for i in 1..=n {
        ctx.step("s", || Ok(i.to_string().into_bytes()))?;
    }
    Ok(format!("{n} steps").into_bytes())
}

fn main() {
    let status = match tabos_workflow::function().as_str() {
        "order" => tabos_workflow::run(order),
        "tally" => tabos_workflow::run(tally),
        "steps" => tabos_workflow::run(steps),
        other => {
            eprintln!("no workflow function {other:?} here (order, tally, steps)");
            2
        }
    };
    std::process::exit(status);
}
