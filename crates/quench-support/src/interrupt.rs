//! A caller's way to stop a long run between its steps and keep what finished: the Python
//! package installs a check of Python's pending signals (Ctrl-C) around a training call, and
//! the training loops ask [`requested`] between epochs. The check lives with the thread that
//! runs the work, for the length of one [`checked`] call; without one, [`requested`] is always
//! false and costs a thread-local read.

use std::cell::{Cell, RefCell};

/// A check installed by [`checked`].
type Check = Box<dyn FnMut() -> bool>;

thread_local! {
    static CHECK: RefCell<Option<Check>> = const { RefCell::new(None) };
    static FIRED: Cell<bool> = const { Cell::new(false) };
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

/// Whether a check is installed on this thread ([`checked`]): work that would move to
/// another thread stays here then, where the check can be asked (Python's pending signals are
/// seen only on its main thread).
pub fn installed() -> bool {
    CHECK.with(|slot| slot.borrow().is_some())
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
        assert!(!installed(), "removed when its call ends");
        let (inside, _) = checked(|| false, installed);
        assert!(inside, "installed on this thread for the call");
        assert!(!requested());
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
}
