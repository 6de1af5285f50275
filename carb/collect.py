"""``python -m carb.collect``: an alias of ``carb-collect`` (:mod:`carb.commands.collect`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.collect import main

    main()
