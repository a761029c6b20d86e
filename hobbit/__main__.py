"""``python -m hobbit``: the same as the ``hobbit`` console script."""

from hobbit.cli import main

if __name__ == "__main__":
    main()
