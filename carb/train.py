"""``python -m carb.train``: an alias of ``carb-train`` (:mod:`carb.commands.train`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.train import main

    main()
