"""Guide 000 from Python: which quantum random-number source wrote a line of bits? The
classifier of configs/qrng/classifier.toml, shortened, on the original's recording, then a GAN
tournament between the sources (pip install ./crates/quench-py). Run from the repository's
root."""
import tomllib

from quench import qrng

with open("configs/qrng/classifier.toml", "rb") as f:
    classifier = tomllib.load(f)
classifier.update(seeds=[89, 90], max_epochs=20)   # the original trains up to 1,000 epochs

outcome = qrng.classify(classifier)                 # data=None: the shipped recording
print(outcome["data"])
for seed in outcome["seeds"]:
    print(f"seed {seed['seed']}: test accuracy {seed['test_accuracy']:.3f} after "
          f"{seed['epochs']} epochs (chance: 1/3)")

with open("configs/qrng/gan.toml", "rb") as f:
    gan = tomllib.load(f)
gan.update(epochs=20, seeds=[42])
played = qrng.tournament(gan)
for pair in played["pairs"]:
    a, b = pair["sources"]
    print(f"{a}v{b}: final KL {pair['mean']:.4f} (a uniform generator: {pair['uniform_kl']:.4f})")
