"""Read results, aggregate sweeps, plots and reports (nothing else)."""
