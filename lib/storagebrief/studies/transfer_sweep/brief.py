def section(study_dir, frame, names):
    pass
