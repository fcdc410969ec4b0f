"""``python -m toolguard_evals.demo``: see :func:`toolguard_evals.demo.run.main`."""

from toolguard_evals.demo.run import main

if __name__ == "__main__":
    main()
