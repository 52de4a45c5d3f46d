"""Real drug molecules (PubChem isomeric-free SMILES), shared by the graph tests: the SMILES, and their bond graphs
built with rdkit (the ``[graph]`` tests' dependency)."""

# Metformin hydrochloride has two components.
DRUGS = {
    "aspirin": "CC(=O)OC1=CC=CC=C1C(=O)O",
    "caffeine": "CN1C=NC2=C1C(=O)N(C(=O)N2C)C",
    "ibuprofen": "CC(C)CC1=CC=C(C=C1)C(C)C(=O)O",
    "paracetamol": "CC(=O)NC1=CC=C(C=C1)O",
    "metformin hydrochloride": "CN(C)C(=N)N=C(N)N.Cl",
    "nicotine": "CN1CCCC1C2=CN=CC=C2",
    "morphine": "CN1CCC23C4C1CC5=C2C(=C(C=C5)O)OC3C(C=C4)O",
    "diazepam": "CN1C(=O)CN=C(C2=C1C=CC(=C2)Cl)C3=CC=CC=C3",
    "penicillin G": "CC1(C(N2C(S1)C(C2=O)NC(=O)CC3=CC=CC=C3)C(=O)O)C",
    "atorvastatin": "CC(C)C1=C(C(=C(N1CCC(CC(CC(=O)O)O)O)C2=CC=C(C=C2)F)C3=CC=CC=C3)C(=O)NC4=CC=CC=C4",
    "imatinib": "CC1=C(C=C(C=C1)NC(=O)C2=CC=C(C=C2)CN3CCN(CC3)C)NC4=NC=CC(=N4)C5=CN=CC=C5",
    "sildenafil": "CCCC1=NN(C2=C1N=C(NC2=O)C3=C(C=CC(=C3)S(=O)(=O)N4CCN(CC4)C)OCC)C",
    "omeprazole": "CC1=CN=C(C(=C1OC)C)CS(=O)C2=NC3=C(N2)C=C(C=C3)OC",
    "loratadine": "CCOC(=O)N1CCC(=C2C3=C(CCC4=C2N=CC=C4)C=C(C=C3)Cl)CC1",
    "warfarin": "CC(=O)CC(C1=CC=CC=C1)C2=C(C3=CC=CC=C3OC2=O)O",
    "dopamine": "C1=CC(=C(C=C1CCN)O)O",
    "serotonin": "C1=CC2=C(C=C1O)C(=CN2)CCN",
    "testosterone": "CC12CCC3C(C1CCC2O)CCC4=CC(=O)CCC34C",
    "ciprofloxacin": "C1CC1N2C=C(C(=O)C3=CC(=C(C=C32)N4CCNCC4)F)C(=O)O",
    "lisinopril": "C1CC(N(C1)C(=O)C(CCCCN)NC(C(=O)O)CCC2=CC=CC=C2)C(=O)O",
}


def drug_bonds() -> list[tuple[str, int, list[tuple[int, int]], list[float]]]:
    """Each drug's heavy-atom bond graph: ``(name, atoms, bonds [(i, j)], bond orders)`` (rdkit; aromatic 1.5)."""
    from rdkit import Chem

    out = []
    for name, smiles in DRUGS.items():
        molecule = Chem.MolFromSmiles(smiles)
        bonds = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in molecule.GetBonds()]
        orders = [b.GetBondTypeAsDouble() for b in molecule.GetBonds()]
        out.append((name, molecule.GetNumAtoms(), bonds, orders))
    return out
