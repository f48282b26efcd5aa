//! A real circuit as one program for the seam's fused read-out
//! ([`quench_kernels::ops::circuit`]): each fixed gate a fixed matrix, each `RY` of an input or
//! a weight a rotation, each run of signed permutations one permutation.

use quench_kernels::ops::circuit::{RealCircuit, Source, Step};

use crate::circuit::Circuit;
use crate::gate::Angle;
use crate::permutation::{HostPermutation, absorb};

/// `circuit` as a [`RealCircuit`], where every gate is real (H, X, Z, RY, CNOT, CZ, SWAP) and
/// the circuit within the program's size; `None` otherwise.
pub(crate) fn real_program(circuit: &Circuit) -> Option<RealCircuit> {
    if !circuit.is_real() {
        return None;
    }
    let qubits = circuit.qubits();
    let mut steps = Vec::new();
    let mut pending: Option<HostPermutation> = None;
    let flush = |pending: Option<HostPermutation>, steps: &mut Vec<Step>| {
        if let Some(p) = pending {
            steps.push(Step::Permutation {
                perm: p.perm,
                signs: p.sign,
            });
        }
    };
    for gate in circuit.gates() {
        if absorb(&mut pending, gate, qubits) {
            continue;
        }
        flush(pending.take(), &mut steps);
        let wire = gate.wires[0];
        // Among the real gates only RY takes an angle.
        steps.push(match gate.angle {
            Some(Angle::Input(i)) => Step::Rotation {
                wire,
                angle: Source::Input(i),
            },
            Some(Angle::Weight(i)) => Step::Rotation {
                wire,
                angle: Source::Weight(i),
            },
            fixed => {
                let u = gate.kind.matrix(match fixed {
                    Some(Angle::Fixed(a)) => a,
                    _ => 0.0,
                })?;
                Step::Fixed {
                    wire,
                    matrix: u.map(|row| row.map(|z| z.re)),
                }
            }
        });
    }
    flush(pending, &mut steps);
    RealCircuit::new(qubits, steps).ok()
}
