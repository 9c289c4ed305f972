//! `kmirror offsets import-mm2`: what a takeover from MirrorMaker 2 would seed, per
//! partition, and doing it with `--apply`. See [`crate::flow::takeover`].

use super::fail;
use super::table;
use crate::config::ResolvedFlow;
use crate::flow::progress_group;
use crate::flow::takeover::{self, Takeover};
use crate::kafka::Cluster;
use crate::plugin::cache::CacheChoice;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `offsets import-mm2`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Only this flow, SOURCE->TARGET (default: every flow).
    #[arg(long)]
    flow: Option<String>,
    /// Seed the progress (otherwise only show it).
    #[arg(long)]
    apply: bool,
    /// Seed even over progress the flow already stored.
    #[arg(long)]
    force: bool,
}

/// Runs `offsets import-mm2`: exit 0 when done (or, without --apply, nothing refused), 1
/// when a cluster fails or a flow refuses, 2 for a bad configuration.
pub fn run(args: &ImportArgs, cache: &CacheChoice) -> ExitCode {
    let cfg = match super::load_config(&args.config, cache) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    let names: Vec<String> = cfg.flows.iter().map(|f| f.name.clone()).collect();
    let flows: Vec<ResolvedFlow> = cfg
        .flows
        .into_iter()
        .filter(|f| args.flow.as_ref().is_none_or(|n| *n == f.name))
        .collect();
    if flows.is_empty() {
        return fail(
            2,
            &format!(
                "no flow `{}`; flows are: {}",
                args.flow.as_deref().unwrap_or_default(),
                names.join(", ")
            ),
        );
    }
    let runtime = match super::runtime(1) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let mut code = ExitCode::SUCCESS;
        for flow in &flows {
            if let Err(message) = import(flow, args).await {
                eprintln!("error: flow {}: {message}", flow.name);
                code = ExitCode::from(1);
            }
        }
        code
    })
}

async fn import(flow: &ResolvedFlow, args: &ImportArgs) -> Result<(), String> {
    let source = Cluster::new(&flow.source).map_err(|e| e.to_string())?;
    let target = Cluster::new(&flow.target).map_err(|e| e.to_string())?;
    let group = progress_group(&flow.source.alias, &flow.target.alias);
    let plan = takeover::prepare(&source, &target, &group, args.force)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "flow {}: {} partition(s) in {} on {}",
        flow.name,
        plan.seeds.len(),
        takeover::mm2_offsets_topic(&flow.source.alias),
        target.alias
    );
    print(&plan);
    for (key, why) in &plan.skipped {
        println!("refused record {key}: {why} (nothing seeded from it)");
    }
    if let Some(why) = &plan.refused {
        return Err(why.clone());
    }
    if !args.apply {
        if !plan.seeds.is_empty() {
            println!("dry run: add --apply to seed the flow's progress (group {group})");
        }
        return Ok(());
    }
    let seeded = takeover::apply(&source, &group, &plan)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "seeded {} partition(s) of group {group} on {}",
        seeded.stored, source.alias
    );
    for ((topic, partition), at, why) in &seeded.refused {
        println!("not seeded: {topic} partition {partition} at {at}: {why}");
    }
    if !seeded.refused.is_empty() {
        return Err(format!(
            "{} partition(s) not seeded: Kafka refused them (listed above); the others were seeded",
            seeded.refused.len()
        ));
    }
    Ok(())
}

fn print(plan: &Takeover) {
    if plan.seeds.is_empty() {
        return;
    }
    let mut rows = vec![
        [
            "source topic",
            "partition",
            "mm2 last mirrored",
            "kmirror starts at",
            "stored progress",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for s in &plan.seeds {
        rows.push(vec![
            s.tp.0.clone(),
            s.tp.1.to_string(),
            s.mm2.to_string(),
            s.next.to_string(),
            s.stored.map_or("-".to_string(), |o| o.to_string()),
        ]);
    }
    let widths = table::widths(&rows);
    for row in &rows {
        println!("{}", table::line(row, &widths));
    }
}
