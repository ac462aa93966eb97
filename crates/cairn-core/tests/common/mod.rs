//! Helpers shared by the engine's integration tests.

use cairn_comm::Threads;
use cairn_core::{Config, Engine};

/// Run `body(rank, engine)` on `ranks` threads, each with its own engine over `cfg`.
pub fn job<T: Send + 'static>(
    ranks: usize,
    cfg: &Config,
    body: impl Fn(usize, &mut Engine) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let handles: Vec<_> = Threads::world(ranks)
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| {
            let (cfg, body) = (cfg.clone(), body.clone());
            std::thread::spawn(move || {
                let mut e = Engine::new(Box::new(comm), cfg).expect("engine");
                let out = body(rank, &mut e);
                e.finalize().expect("finalize");
                out
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
