"""``python -m carb.promote``: an alias of ``carb-promote`` (:mod:`carb.commands.promote`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.promote import main

    main()
