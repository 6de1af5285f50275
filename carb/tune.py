"""``python -m carb.tune``: an alias of ``carb-tune`` (:mod:`carb.commands.tune`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.tune import main

    main()
