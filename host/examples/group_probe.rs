use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let brokers = &args[1];
    let topic = &args[2];
    let extra: Vec<(String, String)> = args[3..]
        .iter()
        .map(|a| {
            let (k, v) = a.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers)
        .set("group.id", format!("probe-{}", std::process::id()))
        .set("enable.auto.commit", "false");
    for (k, v) in &extra {
        cfg.set(k, v);
    }
    let c: BaseConsumer = cfg.create().unwrap();
    c.subscribe(&[topic]).unwrap();
    let start = Instant::now();
    loop {
        let _ = c.poll(Duration::from_millis(100));
        let a = c.assignment().unwrap();
        if a.count() > 0 {
            println!(
                "assigned {} partitions after {:?}",
                a.count(),
                start.elapsed()
            );
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            println!("no assignment after 60s");
            break;
        }
    }
}
