//! The JSON interface: results, batching by structure, and one clear error per bad input.

use burn::backend::NdArray;
use quench_circuit::json::{Document, render};

type B = NdArray<f64>;

fn run(text: &str) -> Result<Vec<Vec<f64>>, String> {
    Document::parse(text)
        .and_then(|d| d.expectations::<B>(&Default::default(), Some(1 << 34)))
        .map_err(|e| e.to_string())
}

#[test]
fn circuits_in_any_order_get_their_own_rows() {
    let text = r#"{"qubits": 2, "circuits": [
        [{"gate": "ry", "wires": [0], "angle": 0.3}],
        [{"gate": "h", "wires": [0]}, {"gate": "cnot", "wires": [0, 1]}],
        [{"gate": "ry", "wires": [0], "angle": 1.3}],
        [{"gate": "RX", "wires": [1], "angle": 2.0}, {"gate": "y", "wires": [0]}]
    ]}"#;
    let rows = run(text).unwrap();
    let expected = [
        [0.3f64.cos(), 1.0],
        [0.0, 0.0],
        [1.3f64.cos(), 1.0],
        [-1.0, 2.0f64.cos()],
    ];
    for (row, e) in rows.iter().zip(expected) {
        assert!(
            row.iter().zip(e).all(|(a, b)| (a - b).abs() < 1e-12),
            "{rows:?}"
        );
    }
    assert!(render(&rows).starts_with("{\"expectations\":[["));
}

#[test]
fn every_bad_input_names_circuit_and_gate() {
    let cases = [
        (
            r#"{"qubits": 2, "circuits": [[], [{"gate": "t", "wires": [0]}]]}"#,
            "circuit 1, gate 0: unknown gate \"t\"",
        ),
        (
            r#"{"qubits": 2, "circuits": [[{"gate": "x", "wires": [2]}]]}"#,
            "circuit 0: gate 0 (x): wire 2 out of range for 2 qubits",
        ),
        (
            r#"{"qubits": 2, "circuits": [[{"gate": "h", "wires": [0]}, {"gate": "cnot", "wires": [1, 1]}]]}"#,
            "circuit 0: gate 1 (cnot): wire 1 given twice",
        ),
        (
            r#"{"qubits": 1, "circuits": [[{"gate": "rx", "wires": [0]}]]}"#,
            "circuit 0: gate 0 (rx): missing angle",
        ),
        (
            r#"{"qubits": 1, "circuits": [[{"gate": "rx", "wires": [0], "angle": "NaN"}]]}"#,
            "circuit 0, gate 0: angle \"NaN\" is not a number",
        ),
        (
            r#"{"qubits": 1, "circuits": [[{"gate": "x", "wires": [0], "angle": 1.0}]]}"#,
            "circuit 0: gate 0 (x): takes no angle",
        ),
        (
            r#"{"qubits": 1, "circuits": [[{"gate": "x", "wires": [-1]}]]}"#,
            "circuit 0, gate 0: wire -1 is not a non-negative integer",
        ),
        (
            r#"{"qubits": 2, "circuits": [[{"gate": "cnot", "wires": [0]}]]}"#,
            "circuit 0: gate 0 (cnot): acts on 2 wire(s), 1 given",
        ),
        (
            r#"{"qubits": 1, "circuits": [[{"gate": "x", "wire": [0]}]]}"#,
            "circuit 0, gate 0: unknown field \"wire\"",
        ),
        (
            r#"{"qubits": 0, "circuits": [[]]}"#,
            "circuit 0: qubits = 0: must be between 1 and 30",
        ),
        (
            r#"{"qubits": 31, "circuits": [[]]}"#,
            "circuit 0: qubits = 31: must be between 1 and 30",
        ),
        (r#"{"circuits": []}"#, "qubits: missing"),
        (r#"{"qubits": 1, "circuits": []}"#, "circuits: empty"),
        (
            r#"{"qubits": 1, "circuit": [[{"gate": "x", "wires": [0]}]]}"#,
            "document: unknown key \"circuit\"",
        ),
        (
            r#"[{"gate": "x", "wires": [0]}]"#,
            "document: not an object",
        ),
        (
            r#"{"qubits": 1, "circuits": [[{"gate": "x", "wires": [0]}]"#,
            "not valid JSON",
        ),
        // serde_json's own values keep the last of two keys without a word.
        (
            r#"{"qubits": 2, "circuits": [[{"gate": "x", "wires": [0]}]], "qubits": 3}"#,
            "not valid JSON: key \"qubits\" given twice",
        ),
        (
            r#"{"qubits": 2, "circuits": [[{"gate": "x", "wires": [0], "wires": [1]}]]}"#,
            "not valid JSON: key \"wires\" given twice",
        ),
    ];
    for (text, message) in cases {
        let error = run(text).unwrap_err();
        assert!(
            error.starts_with(message),
            "{text}\n  gave: {error}\n  want: {message}"
        );
    }
}

#[test]
fn an_angle_beyond_f64_is_refused() {
    // JSON has no NaN or infinity; a literal past f64's range is the nearest thing.
    let error =
        run(r#"{"qubits": 1, "circuits": [[{"gate": "rx", "wires": [0], "angle": 1e999}]]}"#)
            .unwrap_err();
    assert!(
        error.contains("not valid JSON") || error.contains("not finite"),
        "{error}"
    );
}

#[test]
fn a_byte_order_mark_is_read_past() {
    let text = "\u{FEFF}{\"qubits\": 1, \"circuits\": [[{\"gate\": \"x\", \"wires\": [0]}]]}";
    assert_eq!(run(text).unwrap(), run(&text[3..]).unwrap());
}

#[test]
fn more_qubits_than_memory_allows_is_refused_before_allocating() {
    let text = r#"{"qubits": 30, "circuits": [[{"gate": "h", "wires": [29]}]]}"#;
    let error = Document::parse(text)
        .unwrap()
        .expectations::<B>(&Default::default(), Some(1 << 30))
        .unwrap_err()
        .to_string();
    // 4 state buffers of 2^30 f64 (32 GiB) and 35 tables of 2^30 8-byte entries (280 GiB):
    // the 30 wires' X permutations, the gate's permutation and signs, three while building.
    assert!(
        error.starts_with(
            "circuit 0: qubits = 30: a batch of 1 states and the simulator's tables need about \
             319488 MiB, more than the 1024 MiB available"
        ),
        "{error}"
    );
}

/// A long circuit on 12 qubits runs gate by gate, and right: fused, every run of fixed gates
/// became a 4,096 x 4,096 matrix (200 random gates took 92 s and 4.9 GB; 1,000 did not end
/// in 120 s). Gate by gate, 1,000 gates take about 2 s.
#[test]
fn a_long_circuit_on_twelve_qubits_runs_gate_by_gate() {
    let kinds = [
        "h", "x", "y", "z", "rx", "ry", "rz", "phase", "cnot", "cz", "swap",
    ];
    // A fixed pseudo-random sequence (64-bit LCG), so the test reads the same every run.
    let mut state: u64 = 7;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let gates: Vec<String> = (0..1_000)
        .map(|_| {
            let kind = kinds[next(kinds.len() as u64) as usize];
            let a = next(12);
            match kind {
                "cnot" | "cz" | "swap" => {
                    let b = (a + 1 + next(11)) % 12;
                    format!(r#"{{"gate": "{kind}", "wires": [{a}, {b}]}}"#)
                }
                "rx" | "ry" | "rz" | "phase" => {
                    let angle = next(6_283) as f64 / 1_000.0;
                    format!(r#"{{"gate": "{kind}", "wires": [{a}], "angle": {angle}}}"#)
                }
                _ => format!(r#"{{"gate": "{kind}", "wires": [{a}]}}"#),
            }
        })
        .collect();
    let text = format!(r#"{{"qubits": 12, "circuits": [[{}]]}}"#, gates.join(", "));
    let document = Document::parse(&text).unwrap();
    let got = run(&text).unwrap();
    let reference = quench_circuit::reference::z_expectations(
        12,
        &quench_circuit::reference::state(&document.circuits[0], &[], &[]).unwrap(),
    );
    for (g, r) in got[0].iter().zip(&reference) {
        assert!((g - r).abs() < 1e-9, "{:?} vs {reference:?}", got[0]);
    }
}

#[test]
fn the_library_refuses_an_empty_batch_and_a_state_of_another_simulator() {
    use quench_circuit::{Circuit, CircuitError, Gate, GateKind, Mode, Simulator};
    type B = burn::backend::NdArray<f64>;
    let device = Default::default();
    let simulator = |qubits| {
        let circuit = Circuit::new(qubits, vec![Gate::new(GateKind::H, &[0])]).unwrap();
        Simulator::<B>::new(circuit, Mode::Fused, &device).unwrap()
    };
    let (two, three) = (simulator(2), simulator(3));
    // A batch of none divided by zero inside Burn's matmul.
    assert!(matches!(
        two.run(0, None, None),
        Err(CircuitError::EmptyBatch)
    ));
    // Another simulator's state: 8 amplitudes where 4 are expected (Burn panicked on it).
    let state = three.run(5, None, None).unwrap();
    let err = two.z_expectations(&state).unwrap_err();
    assert!(
        matches!(
            err,
            CircuitError::Shape {
                name: "state.re",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "state.re: expected shape [batch, 4] (2^2 qubits), found [5, 8]"
    );
    assert!(two.zz_expectations(&state, &[(0, 1)]).is_err());
    assert!(three.z_expectations(&state).is_ok());
}

/// Issue 53, item 7: a simulator for 30 qubits (its tables alone take hundreds of GiB) and a
/// run of 100,000 circuits of 20 qubits (about 3 GiB a copy of the states, four copies) are
/// refused with the estimate and the limit instead of aborting on a failed allocation. The
/// limit is this machine's available memory, read from the OS; both estimates exceed any
/// machine that runs these tests by more than a factor of ten, so the refusals do not depend
/// on which machine runs them.
#[test]
fn the_library_refuses_simulations_beyond_the_host_memory() {
    use quench_circuit::{Circuit, CircuitError, Gate, GateKind, Mode, Simulator};
    type B = burn::backend::NdArray<f32>;
    let device = Default::default();
    assert!(
        quench_support::budget::host_limit().is_some(),
        "the test machine reports its available memory (/proc/meminfo)"
    );
    let wide = Circuit::new(30, vec![Gate::new(GateKind::H, &[0])]).unwrap();
    match Simulator::<B>::new(wide, Mode::GateByGate, &device) {
        Err(CircuitError::TooLarge {
            qubits: 30,
            batch: 1,
            needed_mib,
            available_mib,
        }) => assert!(
            needed_mib > 10 * available_mib,
            "{needed_mib} MiB of {available_mib}"
        ),
        Err(other) => panic!("expected TooLarge, got {other}"),
        Ok(_) => panic!("a 30-qubit simulator was built"),
    }
    let twenty = Circuit::new(20, vec![Gate::new(GateKind::H, &[0])]).unwrap();
    let simulator = Simulator::<B>::new(twenty, Mode::GateByGate, &device).unwrap();
    let err = simulator.run(100_000, None, None).unwrap_err();
    assert!(
        matches!(
            err,
            CircuitError::TooLarge {
                qubits: 20,
                batch: 100_000,
                ..
            }
        ),
        "{err}"
    );
}
