"""``python -m carb.probe``: an alias of ``carb-probe`` (:mod:`carb.commands.probe`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.probe import main

    main()
