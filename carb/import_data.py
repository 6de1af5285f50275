"""``python -m carb.import_data``: an alias of ``carb-import`` (:mod:`carb.commands.import_data`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.import_data import main

    main()
