"""``python -m carb.quickstart``: an alias of ``carb-quickstart`` (:mod:`carb.commands.quickstart`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.quickstart import main

    main()
