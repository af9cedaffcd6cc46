"""The demo's catalogue: sources scattered over the synthetic cube's field (RA 150, Dec -30, 1 arcsec
pixels, channels about 1.4 GHz), plus one outside it, as a CSV with name, ra, dec (deg), freq (Hz)."""
import sys

import numpy as np


def main(path: str, n_sources: int = 24) -> None:
    rng = np.random.default_rng(44)
    lines = ["name,ra,dec,freq"]
    for i in range(n_sources):
        dra, ddec = rng.uniform(-200, 200, 2) / 3600  # within the 512 x 512 arcsec field
        ra = 150.0 + dra / np.cos(np.radians(30.0))
        freq = 1.4e9 + rng.uniform(-90, 90) * 18.5e3
        lines.append(f"DEMO J{i:03d},{ra:.6f},{-30.0 + ddec:.6f},{freq:.1f}")
    lines.append("far away,10.0,10.0,1.4e9")  # not on the cube: skipped with its reason, not a crash
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
