"""``python -m carb.calibrate``: an alias of ``carb-calibrate`` (:mod:`carb.commands.calibrate`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.calibrate import main

    main()
