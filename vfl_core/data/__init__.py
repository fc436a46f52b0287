"""A party's data: its directory on disk, tables and their encoding, data sets, preparation,
missingness and label mechanisms."""
