//! A caller's way to stop a long run between its steps and keep what finished: the Python
//! package installs a check of Python's pending signals (Ctrl-C) around a training call, and
//! the training loops ask [`requested`] between epochs. The check lives with the thread that
//! runs the work, for the length of one [`checked`] call; without one, [`requested`] is always
//! false and costs a thread-local read. Work that moves to another thread takes the caller's
//! requests with it through [`relayed`]: the caller's thread keeps asking its check (Python's
//! pending signals are seen only on Python's main thread) and the work's thread reads the
//! answer.

use std::cell::{Cell, RefCell};
use std::panic::resume_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A check installed by [`checked`].
type Check = Box<dyn FnMut() -> bool>;

thread_local! {
    static CHECK: RefCell<Option<Check>> = const { RefCell::new(None) };
    static FIRED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's check reads a [`Relay`] (it is asked on another thread already).
    static RELAYING: Cell<bool> = const { Cell::new(false) };
}

/// Removes the check when [`checked`] ends, a panic included.
struct Installed(Option<Check>, bool);

impl Drop for Installed {
    fn drop(&mut self) {
        CHECK.with(|check| *check.borrow_mut() = self.0.take());
        FIRED.with(|fired| fired.set(self.1));
    }
}

/// Runs `work` on this thread with `check` installed, and says whether the check asked to
/// stop: `(work's result, stopped)`. Nested calls restore the outer check when they end.
pub fn checked<T>(check: impl FnMut() -> bool + 'static, work: impl FnOnce() -> T) -> (T, bool) {
    let outer = CHECK.with(|slot| slot.borrow_mut().replace(Box::new(check)));
    let outer_fired = FIRED.with(|fired| fired.replace(false));
    let guard = Installed(outer, outer_fired);
    let result = work();
    let stopped = FIRED.with(Cell::get);
    drop(guard);
    (result, stopped)
}

/// How often a caller whose work runs elsewhere asks its check ([`relayed`]): Ctrl-C is seen
/// within this much of being pressed, and a check costs microseconds (Python's: the GIL taken
/// for a moment), so asking 50 times a second costs nothing measurable.
const POLL: Duration = Duration::from_millis(20);

/// The caller's stop requests as [`relayed`] hands them to its work.
#[derive(Default)]
pub struct Relay(Route);

/// Where a [`Relay`]'s requests come from.
#[derive(Default)]
enum Route {
    /// Nowhere: the caller has no check, or its check is a relay already (asked on the
    /// thread that relays it).
    #[default]
    None,
    /// The caller's own thread, which keeps its check: no thread could be had to relay it
    /// from, so work that wants the check asked stays on this thread ([`Relay::stays_here`]).
    Here,
    /// A flag the caller's thread sets when its check says stop.
    Flag(Arc<AtomicBool>),
}

impl Relay {
    /// Whether the caller's check can be asked only on this thread: work that would move to
    /// another thread runs here instead, where [`requested`] asks the check directly.
    pub fn stays_here(&self) -> bool {
        matches!(self.0, Route::Here)
    }

    /// Runs `work` on this thread with the caller's requests answering [`requested`].
    pub fn install<T>(self, work: impl FnOnce() -> T) -> T {
        match self.0 {
            Route::Flag(flag) => {
                let _relaying = Relaying::mark();
                checked(move || flag.load(Ordering::Relaxed), work).0
            }
            Route::None | Route::Here => work(),
        }
    }
}

/// Marks this thread's check as a relay while it lives (a relayed call inside relayed work
/// goes on in place), restoring the mark it found when dropped, a panic included: a pool
/// thread lives on after a run's panic.
struct Relaying(bool);

impl Relaying {
    fn mark() -> Self {
        Self(RELAYING.with(|relaying| relaying.replace(true)))
    }
}

impl Drop for Relaying {
    fn drop(&mut self) {
        RELAYING.with(|relaying| relaying.set(self.0));
    }
}

/// Tells the caller of [`relayed`] that its work has ended, however it ends.
struct Ended<'a> {
    done: &'a AtomicBool,
    caller: std::thread::Thread,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        self.caller.unpark();
    }
}

/// Runs `work`, which may move itself to other threads, with this thread's check relayed to
/// it: where a check is installed here ([`checked`]) and not already a relay, `work` runs on a
/// thread of its own while this one asks the check every `POLL` (20 ms) and passes a request on
/// through the [`Relay`] `work` is given, until `work` ends; a request it asked stays
/// requested here ([`requested`]) after `work` ends, read or not. Without a check, or inside
/// relayed work, `work` runs here with a relay that installs nothing. Where no thread can be
/// had, `work` runs here with a relay that [`Relay::stays_here`]. A panic in `work` is resumed
/// here.
pub fn relayed<T: Send>(work: impl FnOnce(Relay) -> T + Send) -> T {
    // A main thread's stack: the work runs on this thread where it cannot move to a pool.
    const STACK: usize = 8 << 20;
    if CHECK.with(|slot| slot.borrow().is_none()) || RELAYING.with(Cell::get) {
        return work(Relay::default());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let done = AtomicBool::new(false);
    // The work stays reachable from here, so that it can run here when no thread is given.
    let slot = Mutex::new(Some(work));
    let take = || slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    std::thread::scope(|scope| {
        let relay = Relay(Route::Flag(flag.clone()));
        let ended = Ended {
            done: &done,
            caller: std::thread::current(),
        };
        let spawned = std::thread::Builder::new()
            .name("quench-relayed".into())
            .stack_size(STACK)
            .spawn_scoped(scope, move || {
                let _ended = ended;
                take().map(|work| work(relay))
            });
        let Ok(handle) = spawned else {
            return take().map(|work| work(Relay(Route::Here)));
        };
        // `done` rather than the handle's `is_finished`, which turns true only after the
        // thread has stored its result: woken first, this thread would sleep a whole POLL.
        while !done.load(Ordering::Acquire) {
            if !flag.load(Ordering::Relaxed) && requested() {
                flag.store(true, Ordering::Relaxed);
            }
            std::thread::park_timeout(POLL);
        }
        handle.join().unwrap_or_else(|panic| resume_unwind(panic))
    })
    .expect("the work is taken once, by the thread that runs it")
}

/// Whether the caller asked to stop: the installed check is run (once it has said yes, it is
/// not asked again and the answer stays yes until its [`checked`] ends).
pub fn requested() -> bool {
    if FIRED.with(Cell::get) {
        return true;
    }
    let asked = CHECK.with(|slot| slot.borrow_mut().as_mut().is_some_and(|check| check()));
    if asked {
        FIRED.with(|fired| fired.set(true));
    }
    asked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_check_nothing_is_requested() {
        assert!(!requested());
    }

    #[test]
    fn a_check_is_asked_until_it_says_stop_and_only_inside_its_call() {
        let counter = std::rc::Rc::new(Cell::new(0));
        let seen = counter.clone();
        let (steps, stopped) = checked(
            move || {
                seen.set(seen.get() + 1);
                seen.get() == 3
            },
            || {
                let mut steps = 0;
                while !requested() {
                    steps += 1;
                }
                // Stays requested without asking again.
                assert!(requested());
                steps
            },
        );
        assert_eq!((steps, stopped, counter.get()), (2, true, 3));
        assert!(!requested(), "removed when its call ends");
    }

    #[test]
    fn a_nested_call_restores_the_outer_check() {
        let ((inner, after), outer) = checked(
            || false,
            || {
                let inner = checked(|| true, requested);
                (inner, requested())
            },
        );
        assert_eq!((inner, after, outer), ((true, true), false, false));
    }

    #[test]
    fn without_a_check_relayed_work_runs_here() {
        let caller = std::thread::current().id();
        let (thread, asked) =
            relayed(|relay| relay.install(|| (std::thread::current().id(), requested())));
        assert_eq!((thread, asked), (caller, false));
    }

    #[test]
    fn the_callers_check_is_asked_on_its_thread_and_relayed_to_the_work() {
        let caller = std::thread::current().id();
        let asked_elsewhere = Arc::new(AtomicBool::new(false));
        let asks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (seen, stop) = (asked_elsewhere.clone(), asks);
        let ((worker, nested, relaying), stopped) = checked(
            move || {
                seen.fetch_or(std::thread::current().id() != caller, Ordering::SeqCst);
                // Says stop at its third asking, some POLLs into the work.
                stop.fetch_add(1, Ordering::SeqCst) + 1 >= 3
            },
            || {
                relayed(|relay| {
                    relay.install(|| {
                        let worker = std::thread::current().id();
                        // Relayed work inside relayed work goes on in place.
                        let nested = relayed(|inner| inner.install(|| std::thread::current().id()));
                        // Ends once the caller's request has reached this thread; a broken
                        // relay fails the test rather than hanging it.
                        let deadline = std::time::Instant::now() + Duration::from_secs(30);
                        while !requested() {
                            assert!(std::time::Instant::now() < deadline, "never relayed");
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        (worker, nested, RELAYING.with(Cell::get))
                    })
                })
            },
        );
        assert!(stopped, "the caller's check said stop");
        assert_ne!(worker, caller, "the work ran on a thread of its own");
        assert_eq!(nested, worker);
        assert!(relaying, "marked as a relay while the work ran");
        assert!(
            !asked_elsewhere.load(Ordering::SeqCst),
            "asked on the caller's thread only"
        );
        assert!(!requested(), "nothing installed here after the call");
    }

    #[test]
    fn a_relay_leaves_its_thread_as_it_found_it_after_a_panic() {
        let relay = Relay(Route::Flag(Arc::new(AtomicBool::new(true))));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            relay.install(|| {
                assert!(requested(), "the flag answers");
                panic!("in the work")
            })
        }));
        assert!(outcome.is_err());
        assert!(!RELAYING.with(Cell::get), "unmarked");
        assert!(!requested(), "the check removed");
        assert!(!Relay::default().stays_here() && Relay(Route::Here).stays_here());
    }

    #[test]
    fn a_panic_in_relayed_work_is_resumed_on_the_caller() {
        let outcome = std::panic::catch_unwind(|| {
            checked(|| false, || relayed(|_| -> u8 { panic!("in the work") }))
        });
        let payload = outcome.expect_err("the panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"in the work"));
    }
}
