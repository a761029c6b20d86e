"""The simulator: configs, cost model, policies, simpy engine, results, entry points."""
